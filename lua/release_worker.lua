-- An operator declares a worker dead, one bounded step at a time: the step gives back the
-- worker's newest `step` jobs among those leased up to `bound` (lease live or expired) to the
-- front of waiting, without spending an attempt; those leases are lost. Steps go from the
-- newest lease to the oldest, so the oldest lease ends up first in line; `bound` (a fence) keeps
-- leases made after the first step out, so the release ends even while the worker leases more.
-- The step looks for its jobs in one window of the ledger from its newest end (the whole ledger
-- when it is short), `offset` entries in: the next step goes on where this one stopped.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes ACTIVE, DEADLINES, WORKERS,
--             WAIT or PRIO (a grouped job: its group's line), META, the worker's held set, publishes on WAKE
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     worker name
-- ARGV[3]     bound: the highest fence to release, "" on the first step (then: the queue's
--             current fence)
-- ARGV[4]     step: at most this many jobs
-- ARGV[5]     ledger offset: where this step's window starts (0, or the previous step's answer)
-- ARGV[6]     "1": the first step also ends the worker's session (deletes its session hash and
--             its entry in the sessions ZSET, derived from the prefix); absent or "0": no
-- ARGV[7]     the calling token's id, "" or absent for none (tokens off, or an admin): nothing
--             is done when the worker name belongs to another token (include/workers.lua
--             claim_worker)
-- A job whose cancellation was requested ends cancelled instead (not among the released).
-- The last step frees the worker's name (deletes its owner record, derived from the prefix)
-- when the worker is left with no job and no session: another token may use it from then on.
-- Emits released or cancelled.
-- Returns     {bound, more (1 when jobs are left), stale, offset, released ids, oldest lease
--             first}, or {WORKER_OWNED} (-8) when the worker name belongs to another token
-- @include base
-- @include workers
-- @include events
-- @include retention
-- @include waiting
-- @include ledger
-- @include flows
local worker, step, offset = ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5])
if owned_by_another(worker, ARGV[7] or '') then return {WORKER_OWNED} end
local held = held_key(worker)
local bound = ARGV[3]
if bound == '' then
  bound = redis.call('HGET', META, 'fence') or '0'
  if ARGV[6] == '1' then
    redis.call('DEL', session_key(worker))
    redis.call('ZREM', SESSIONS, worker)
  end
end
local ids = redis.call('ZREVRANGEBYSCORE', held, bound, '-inf', 'LIMIT', 0, step)
local wanted, left, gone, priority, cancelling, group_of = {}, 0, {}, {}, {}, {}
for _, id in ipairs(ids) do
  local job = redis.call('HMGET', job_key(id), 'state', 'worker', 'priority', 'cancel_requested', 'cancel_reason',
    'group')
  if job[1] == 'active' and job[2] == worker then
    wanted[id] = true
    left = left + 1
    priority[id] = number_or(job[3], 0)
    group_of[id] = job[6]
    if job[4] then cancelling[id] = job[5] or false end
  else
    gone[#gone + 1] = id
  end
end

if redis.call('LLEN', ACTIVE) <= LEDGER_STEP_SCAN then offset = 0 end
local found, scanned, reached_end = find_in_ledger(wanted, left, offset, LEDGER_STEP_SCAN, true)
local index_of = {}
for _, entry in ipairs(found) do index_of[entry[1]] = entry[2] end
local whole_ledger = offset == 0 and reached_end -- then what was not found is not in the ledger

local now = now_ms()
local departures = new_departures(true)
local cut, released = {}, {}
local more = #ids == step and 1 or 0
for _, id in ipairs(ids) do -- newest first, each pushed to the front: the oldest ends first
  if priority[id] and (index_of[id] or whole_ledger) then
    if index_of[id] then cut[#cut + 1] = index_of[id] end
    local key = job_key(id)
    leave_ledger(departures, id, key, worker, nil, group_of[id])
    if cancelling[id] ~= nil then
      cancel_job(id, key, now, cancelling[id] or nil)
    else
      redis.call('HSET', key, 'state', 'waiting', 'redeliver', 1, 'updated_at', now)
      push_waiting(id, priority[id], true, group_of[id])
      released[#released + 1] = id
      emit('released', id, '"worker":"' .. worker .. '"')
    end
  elseif priority[id] then
    more = 1 -- beyond this step's window: a later step finds it
  end
end
cut_from_ledger(cut, true)
detach(departures)
if #gone > 0 then
  stale_entries = #gone
  call_chunked('ZREM', held, gone)
  if redis.call('ZCARD', held) == 0 then redis.call('SREM', WORKERS, worker) end
end
wake_waiters(#released)
if more == 0 and redis.call('EXISTS', held, session_key(worker)) == 0 then
  redis.call('DEL', owner_key(worker))
end
local reply = {bound, more, stale_entries, reached_end and 0 or offset + scanned - #cut}
for i = #released, 1, -1 do reply[#reply + 1] = released[i] end
return finish_and_deliver(reply, now)
