-- The stalled sweep, one bounded step: jobs whose lease expired leave the ledger for the front
-- of waiting (their attempt counted) or, on their last attempt, for FAILED; due delayed jobs are
-- promoted; finished jobs past their retention time or beyond their count are deleted with
-- their keys. Expired leases are found through DEADLINES, never by scanning the ledger; the lock
-- stays the truth, so a job whose lock still exists (renewed in the same millisecond) is only
-- re-indexed. Safe to run from several processes at once: each step re-checks what it moves.
-- Last, the queue's entry in the due index is set to when its next sweep has work to do, or
-- removed when nothing lies ahead.
-- KEYS[1..11] the queue's keys (see include/common.lua)
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     batch size: at most this many jobs per kind of work (at most 5000)
-- Returns     {reclaimed, dead_lettered, promoted, deleted, more, stale}: more = 1 when a batch
--             was full (the due index then says now); stale = index entries dropped
-- @include common
local batch = tonumber(ARGV[2])
local now = now_ms()
local more = 0
local expired = redis.call('ZRANGEBYSCORE', DEADLINES, '-inf', now, 'LIMIT', 0, batch)
if #expired == batch then more = 1 end
local reclaimed, dead_lettered = 0, 0
local departures = new_departures()
local renewed, orphans = {}, {}
-- Newest deadline first, so that within this batch the job whose lease expired first ends up
-- first in line (a later batch goes in front of it: its leases are older, not newer, than the
-- queue's new jobs, so all of them still come before those).
for i = #expired, 1, -1 do
  local id = expired[i]
  local lock_ttl_ms = redis.call('PTTL', lock_key(id))
  if lock_ttl_ms > 0 then
    renewed[#renewed + 1] = now + lock_ttl_ms
    renewed[#renewed + 1] = id
  else
    local key = job_key(id)
    local job = redis.call('HMGET', key, 'state', 'worker', 'attempt', 'max_attempts', 'priority')
    if job[1] ~= 'active' then
      -- No job in flight behind this deadline: drop it (and the id from the ledger, if there).
      stale_entries = stale_entries + 1
      orphans[#orphans + 1] = id
    else
      local worker = job[2] or nil
      leave_ledger(departures, id, key, worker)
      redis.call('HSET', key, 'error', 'lease expired: worker ' .. (worker or '?') .. ' stopped heartbeating')
      if number_or(job[3], 0) >= number_or(job[4], DEFAULT_MAX_ATTEMPTS) then
        dead_letter(id, key, now)
        dead_lettered = dead_lettered + 1
      else
        redis.call('HSET', key, 'state', 'waiting', 'updated_at', now)
        push_waiting(id, number_or(job[5], 0), true)
        reclaimed = reclaimed + 1
      end
    end
  end
end
detach(departures)
if #orphans > 0 then
  remove_from_ledger(orphans)
  call_chunked('ZREM', DEADLINES, orphans)
end
call_chunked('ZADD', DEADLINES, renewed)
local promoted, due = promote_due(now, batch)
if due == batch then more = 1 end
local deleted = 0
for _, retention in ipairs({{COMPLETED, COMPLETED_RETENTION_MS}, {FAILED, FAILED_RETENTION_MS}}) do
  local finished = retention[1]
  local old = redis.call('ZRANGEBYSCORE', finished, '-inf', now - retention[2], 'LIMIT', 0, batch)
  for _, id in ipairs(old) do redis.call('DEL', job_key(id)) end
  call_chunked('ZREM', finished, old)
  if #old == batch then more = 1 end
  deleted = deleted + #old
end
for _, cap in ipairs({{COMPLETED, COMPLETED_MAX}, {FAILED, FAILED_MAX}}) do
  local trimmed = keep_at_most(cap[1], cap[2], batch)
  if trimmed == batch then more = 1 end
  deleted = deleted + trimmed
end
wake_waiters(reclaimed + promoted)

-- When the next sweep of this queue has work to do.
local function earliest(key, after_ms)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first == 0 then return nil end
  return tonumber(first[2]) + after_ms
end
local next_at = more == 1 and now or nil
for _, due_at in ipairs({
  earliest(DEADLINES, 0) or false, earliest(DELAYED, 0) or false,
  earliest(COMPLETED, COMPLETED_RETENTION_MS) or false, earliest(FAILED, FAILED_RETENTION_MS) or false,
}) do
  if due_at and (next_at == nil or due_at < next_at) then next_at = due_at end
end
if next_at then
  redis.call('ZADD', DUE, next_at, QUEUE)
else
  redis.call('ZREM', DUE, QUEUE)
end
return {reclaimed, dead_lettered, promoted, deleted, more, stale_entries}
