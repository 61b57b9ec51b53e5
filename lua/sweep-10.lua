-- The stalled sweep, one bounded batch: jobs whose lease expired leave the ledger for the front
-- of waiting (their attempt counted) or, on their last attempt, for FAILED; due delayed jobs are
-- promoted; completed and failed jobs past retention are deleted with their keys. Expired leases
-- are found through DEADLINES, never by scanning the ledger; the lock stays the truth, so a job
-- whose lock still exists (renewed in the same millisecond) is only re-indexed. Safe to run from
-- several replicas at once: each step re-checks what it moves.
-- KEYS[1..10] the queue's keys (see include/common.lua)
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     batch size: at most this many jobs per kind of work
-- ARGV[3]     completed retention (ms)
-- ARGV[4]     failed retention (ms)
-- Returns     {reclaimed, dead_lettered, promoted, deleted, more}: more = 1 when a batch was full
-- @include common
local batch = tonumber(ARGV[2])
local now = now_ms()
local more = 0
local expired = redis.call('ZRANGEBYSCORE', DEADLINES, '-inf', now, 'LIMIT', 0, batch)
if #expired == batch then more = 1 end
local reclaimed, dead_lettered = 0, 0
local departures = new_departures()
-- Newest deadline first, so that within this batch the job whose lease expired first ends up
-- first in line (a later batch goes in front of it: its leases are older, not newer, than the
-- queue's new jobs, so all of them still come before those).
for i = #expired, 1, -1 do
  local id = expired[i]
  local lock_ttl_ms = redis.call('PTTL', lock_key(id))
  if lock_ttl_ms > 0 then
    redis.call('ZADD', DEADLINES, now + lock_ttl_ms, id)
  else
    local key = job_key(id)
    local job = redis.call('HMGET', key, 'worker', 'attempt', 'max_attempts', 'priority')
    local worker = job[1] or nil
    leave_ledger(departures, id, key, worker)
    redis.call('HSET', key, 'error', 'lease expired: worker ' .. (worker or '?') .. ' stopped heartbeating')
    if number_or(job[2], 0) >= number_or(job[3], DEFAULT_MAX_ATTEMPTS) then
      dead_letter(id, key, now)
      dead_lettered = dead_lettered + 1
    else
      redis.call('HSET', key, 'state', 'waiting', 'updated_at', now)
      push_waiting(id, number_or(job[4], 0), true)
      reclaimed = reclaimed + 1
    end
  end
end
detach(departures)
local promoted = promote_due(now, batch)
if promoted == batch then more = 1 end
local deleted = 0
for _, retention in ipairs({{COMPLETED, tonumber(ARGV[3])}, {FAILED, tonumber(ARGV[4])}}) do
  local finished = retention[1]
  local old = redis.call('ZRANGEBYSCORE', finished, '-inf', now - retention[2], 'LIMIT', 0, batch)
  for _, id in ipairs(old) do
    redis.call('DEL', job_key(id))
    redis.call('ZREM', finished, id)
  end
  if #old == batch then more = 1 end
  deleted = deleted + #old
end
wake_waiters(reclaimed + promoted)
return {reclaimed, dead_lettered, promoted, deleted, more}
