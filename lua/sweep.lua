-- The stalled sweep, one bounded step: jobs whose lease expired, and the jobs of workers whose
-- session lapsed, leave the ledger for the front of waiting (their attempt counted) or, on their
-- last attempt, for FAILED; due delayed jobs are promoted; finished jobs past their retention
-- time or beyond their count are deleted with their keys (after the queue's own retention
-- times, META "completed_retention_s" and "failed_retention_s", when its settings have them).
-- Expired leases are found through DEADLINES; the lock stays the truth, so a job whose lock
-- still exists (renewed in the same millisecond) is only re-indexed. Lapsed sessions are found
-- through SESSIONS (worker -> when its session lapses): a lapse takes the jobs the worker holds
-- with a fence up to the lapse's bound (the session's lapsed_fence: the queue's fence when the
-- lapse was first seen, by this sweep, a lease or a heartbeat of the worker), locks live or not,
-- so a lease made after the lapse stays; the lapse is over when none is left, then the session
-- is deleted (or, when the worker started a new one meanwhile, kept without the bound). Both
-- take one path (settle).
-- The step looks for them in one window of the ledger (include/ledger.lua, find_in_ledger),
-- from `offset` entries past its oldest end: the whole ledger when it is short; else the next
-- step goes on where this one stopped, so a step costs the same whatever the ledger's length.
-- Safe to run from several processes at once: each step re-checks what it moves.
-- A reclaimed job counts a stall (job field "stalls"); one whose cancellation was requested ends
-- cancelled instead; one whose stalls now exceed the queue's max_stalls (META field, absent: no
-- limit) is dead-lettered with reason "stalled", even with attempts left. Emits reclaimed, failed
-- (reason "lease_expired" or "stalled") or cancelled, and counts reclaimed and dead-lettered jobs
-- in the history.
-- Last, the queue's entry in the due index is set to when its next sweep has work to do (the
-- earliest of: a lease's end, a session's lapse, a delayed job's due time, a retention's end, a
-- schedule's next run), or removed when nothing lies ahead.
-- KEYS[1..11] the queue's keys (see include/base.lua); also the sessions ZSET and the
--             workers' session hashes, derived from the prefix
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     batch size: at most this many jobs per kind of work (at most 5000), and this many
--             lapsed sessions
-- ARGV[3]     ledger offset: where this step's window starts (0, or the previous step's answer)
-- Returns     {reclaimed, dead_lettered, promoted, deleted, more, stale, offset, schedules_due, outbox,
--             flows_due}:
--             more = 1 when work is left (a full batch, or expired leases or lapsed sessions'
--             jobs beyond this step's window; the due index then says now); stale = index
--             entries dropped; offset = where the next step's window starts; schedules_due = 1
--             when a schedule's run is due (the service fires it: fire_schedules.lua);
--             outbox = entries in the queue's outbox (the service delivers them: deliver.lua);
--             flows_due = 1 when a flow's creation record is old enough to be taken for cut
--             short (the service makes the flow again: lua/flow_record.lua)
-- @include base
-- @include workers
-- @include history
-- @include events
-- @include retention
-- @include waiting
-- @include ledger
-- @include schedule
-- @include flows
local batch, offset = tonumber(ARGV[2]), tonumber(ARGV[3])
local LEDGER_MISS_GRACE_MS = 60000
local LEDGER_MISS_PER_STEP = 4
local now = now_ms()
local more = 0
local expired, deadline_of = {}, {}
local scored = redis.call('ZRANGEBYSCORE', DEADLINES, '-inf', now, 'WITHSCORES', 'LIMIT', 0, batch)
for i = 1, #scored, 2 do
  expired[#expired + 1] = scored[i]
  deadline_of[scored[i]] = tonumber(scored[i + 1])
end
if #expired == batch then more = 1 end

-- Lapsed sessions: the jobs their workers hold up to each lapse's bound join the expired ones
-- (lapsed[id] = true: taken whatever its lock says).
local lapsed, lapsed_ids, lapses = {}, {}, {}
for _, worker in ipairs(redis.call('ZRANGEBYSCORE', SESSIONS, '-inf', now, 'LIMIT', 0, batch)) do
  local session = session_key(worker)
  local fields = redis.call('HMGET', session, 'expires_at', 'lapsed_fence')
  local live_until, bound = fields[1], fields[2]
  if live_until and tonumber(live_until) <= now then live_until = nil end
  if not fields[1] then
    redis.call('ZREM', SESSIONS, worker) -- no session behind the entry
    stale_entries = stale_entries + 1
  elseif live_until and not bound then
    redis.call('ZADD', SESSIONS, live_until, worker) -- renewed: not due yet
  elseif #lapsed_ids >= batch then
    more = 1
  else
    if not bound then
      bound = redis.call('HGET', META, 'fence') or '0'
      redis.call('HSET', session, 'lapsed_fence', bound)
    end
    local held = held_key(worker)
    local ids = redis.call('ZRANGEBYSCORE', held, '-inf', bound, 'LIMIT', 0, batch - #lapsed_ids)
    local stale = {}
    for _, id in ipairs(ids) do
      local job = redis.call('HMGET', job_key(id), 'state', 'worker')
      if job[1] == 'active' and job[2] == worker then
        lapsed[id] = true
        lapsed_ids[#lapsed_ids + 1] = id
      else
        stale[#stale + 1] = id
      end
    end
    if #stale > 0 then
      stale_entries = stale_entries + #stale
      call_chunked('ZREM', held, stale)
      if redis.call('ZCARD', held) == 0 then redis.call('SREM', WORKERS, worker) end
    end
    lapses[#lapses + 1] = {worker, bound, live_until}
  end
end
-- Every job to settle, expired leases first, each once.
local settling = {}
for _, id in ipairs(expired) do settling[#settling + 1] = id end
for _, id in ipairs(lapsed_ids) do
  if not deadline_of[id] then settling[#settling + 1] = id end
end

-- Where each job to settle sits in the ledger (this step's window of it).
if redis.call('LLEN', ACTIVE) <= LEDGER_STEP_SCAN then offset = 0 end
local wanted = {}
for _, id in ipairs(settling) do wanted[id] = true end
local found, scanned, reached_end = find_in_ledger(wanted, #settling, offset, LEDGER_STEP_SCAN, false)
local index_of = {}
for _, entry in ipairs(found) do index_of[entry[1]] = entry[2] end
-- Read from the start to the end in this one step: what was not found is not in the ledger.
local whole_ledger = offset == 0 and reached_end

local reclaimed, dead_lettered = 0, 0
local departures = new_departures(true)
local cut, renewed, gone, returning = {}, {}, {}, {}

local max_stalls = false -- the queue's setting, read when first needed (nil: no limit)
local function stalls_allowed()
  if max_stalls == false then max_stalls = tonumber(redis.call('HGET', META, 'max_stalls') or '') end
  return max_stalls
end

-- One job whose lease expired (its deadline passed) or whose worker's session lapsed, its
-- ledger entry at `index` (nil: not in the ledger). An expired deadline whose lock lives on (a
-- renewal) is only re-indexed; a lapse takes the job whatever its lock says.
local function settle(id, index)
  local lock_ttl_ms = lapsed[id] and 0 or redis.call('PTTL', lock_key(id))
  if lock_ttl_ms > 0 then
    renewed[#renewed + 1] = now + lock_ttl_ms
    renewed[#renewed + 1] = id
    return
  end
  if index then cut[#cut + 1] = index end
  local key = job_key(id)
  local job = redis.call('HMGET', key, 'state', 'worker', 'attempt', 'max_attempts', 'priority', 'stalls',
    'cancel_requested', 'cancel_reason', 'group')
  if job[1] ~= 'active' then
    -- No job in flight behind this deadline: drop it (and its ledger entry, if any).
    stale_entries = stale_entries + 1
    gone[#gone + 1] = id
    return
  end
  local worker = job[2] or nil
  leave_ledger(departures, id, key, worker, nil, job[9])
  if job[7] then
    cancel_job(id, key, now, job[8])
    return
  end
  local error_text = (lapsed[id] and 'session lapsed' or 'lease expired') .. ': worker ' .. (worker or '?') ..
    ' stopped heartbeating'
  local attempt = number_or(job[3], 0)
  local stalls = number_or(job[6], 0) + 1
  local limit = stalls_allowed()
  local reason = nil -- stays nil when the job goes back to waiting
  if limit and stalls > limit then
    reason = 'stalled'
    error_text = error_text .. ' (' .. stalls .. ' stalls, at most ' .. limit .. ' allowed)'
  elseif attempt >= number_or(job[4], DEFAULT_MAX_ATTEMPTS) then
    reason = 'lease_expired'
  end
  redis.call('HSET', key, 'error', error_text, 'stalls', text(stalls))
  if reason then
    dead_letter(id, key, now, attempt, reason, error_text)
    dead_lettered = dead_lettered + 1
  else
    redis.call('HSET', key, 'state', 'waiting', 'updated_at', now)
    returning[#returning + 1] = {id, number_or(job[5], 0), job[9]}
    reclaimed = reclaimed + 1
    emit('reclaimed', id, '"worker":"' .. (worker or '') .. '","attempt":' .. attempt)
  end
end

local overdue = {}
for _, id in ipairs(settling) do
  if index_of[id] or whole_ledger then
    settle(id, index_of[id])
  elseif deadline_of[id] and deadline_of[id] < now - LEDGER_MISS_GRACE_MS and #overdue < LEDGER_MISS_PER_STEP then
    overdue[#overdue + 1] = id
  else
    more = 1 -- beyond this step's window: a later step finds it
  end
end
local cut_in_window = #cut
cut_from_ledger(cut, false)
-- A lease that expired a minute ago and no window has met yet (its ledger entry is missing, or
-- the ledger is very long): its entry is looked for alone (LREM), a few per step.
for _, id in ipairs(overdue) do
  if redis.call('PTTL', lock_key(id)) <= 0 then redis.call('LREM', ACTIVE, -1, id) end
  settle(id, nil)
end
detach(departures)
call_chunked('ZREM', DEADLINES, gone)
call_chunked('ZADD', DEADLINES, renewed)
-- Pushed to the front newest deadline first, so that the job whose lease expired first ends up
-- first in line (a later step goes in front of these: its leases expired no earlier).
for i = #returning, 1, -1 do push_waiting(returning[i][1], returning[i][2], true, returning[i][3]) end
-- A lapse with nothing left under its bound is over.
for _, lapse in ipairs(lapses) do
  local worker, bound, live_until = lapse[1], lapse[2], lapse[3]
  if redis.call('ZCOUNT', held_key(worker), '-inf', bound) > 0 then
    more = 1
  elseif live_until then
    redis.call('HDEL', session_key(worker), 'lapsed_fence') -- the worker's new session goes on
    redis.call('ZADD', SESSIONS, live_until, worker)
  else
    redis.call('DEL', session_key(worker))
    redis.call('ZREM', SESSIONS, worker)
  end
end
local next_offset = reached_end and 0 or offset + scanned - cut_in_window

local promoted, due = promote_due(now, batch)
if due == batch then more = 1 end
local deleted = 0
-- The queue's own retention times (its settings) when it has them, else the service's.
local completed_retention_ms = retention_ms('completed_retention_s', COMPLETED_RETENTION_MS)
local failed_retention_ms = retention_ms('failed_retention_s', FAILED_RETENTION_MS)
for _, retention in ipairs({
  {COMPLETED, completed_retention_ms}, {FAILED, failed_retention_ms}, {CANCELLED, failed_retention_ms},
}) do
  local finished = retention[1]
  local old = redis.call('ZRANGEBYSCORE', finished, '-inf', now - retention[2], 'LIMIT', 0, batch)
  local keys = {}
  for i, id in ipairs(old) do keys[i] = job_key(id) end
  add_parents_keys(keys, old)
  call_chunked('DEL', nil, keys)
  call_chunked('ZREM', finished, old)
  if #old == batch then more = 1 end
  deleted = deleted + #old
end
for _, cap in ipairs({{COMPLETED, COMPLETED_MAX}, {FAILED, FAILED_MAX}, {CANCELLED, FAILED_MAX}}) do
  local trimmed = keep_at_most(cap[1], cap[2], batch)
  if trimmed == batch then more = 1 end
  deleted = deleted + trimmed
end
wake_waiters(reclaimed + promoted)
count_history('reclaimed', reclaimed)

-- When the next sweep of this queue has work to do.
local function earliest(key, after_ms)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first == 0 then return nil end
  return tonumber(first[2]) + after_ms
end
-- Finished children whose parents this queue's calls could not reach wait in its outbox: the
-- service delivers them after this step (deliver.lua), and the queue stays due until it did.
local outbox = redis.call('LLEN', outbox_key())
local next_at = (more == 1 or outbox > 0) and now or nil
for _, due_at in ipairs({
  earliest(DEADLINES, 0) or false, earliest(SESSIONS, 0) or false, earliest(DELAYED, 0) or false,
  earliest(COMPLETED, completed_retention_ms) or false, earliest(FAILED, failed_retention_ms) or false,
  earliest(CANCELLED, failed_retention_ms) or false, earliest(TIMETABLE, 0) or false,
  earliest(flows_key(), @FLOW_REPLAY_AFTER_MS@) or false,
}) do
  if due_at and (next_at == nil or due_at < next_at) then next_at = due_at end
end
if next_at then
  redis.call('ZADD', DUE, next_at, QUEUE)
else
  redis.call('ZREM', DUE, QUEUE)
end
-- Due schedules are fired by the service (fire_schedules.lua), which computes their next runs.
local schedules_due = #redis.call('ZRANGE', TIMETABLE, '-inf', now, 'BYSCORE', 'LIMIT', 0, 1)
-- Flows whose creation was cut short: the service makes them again (core/flows.py).
local flows_due = #redis.call('ZRANGE', flows_key(), '-inf', now - @FLOW_REPLAY_AFTER_MS@, 'BYSCORE', 'LIMIT', 0, 1)
return finish_and_deliver({reclaimed, dead_lettered, promoted, deleted, more, stale_entries, next_offset, schedules_due,
  outbox, flows_due}, now)
