-- An operator declares a worker dead, one bounded step at a time: the step gives back the
-- worker's newest `step` jobs among those leased up to `bound` (lease live or expired) to the
-- front of waiting, without spending an attempt; those leases are lost. Steps go from the
-- newest lease to the oldest, so the oldest lease ends up first in line; `bound` (a fence) keeps
-- leases made after the first step out, so the release ends even while the worker leases more.
-- KEYS[1..11] the queue's keys (see include/common.lua); writes ACTIVE, DEADLINES, WORKERS,
--             WAIT or PRIO, META, the worker's held set, publishes on WAKE
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     worker name
-- ARGV[3]     bound: the highest fence to release, "" on the first step (then: the queue's
--             current fence)
-- ARGV[4]     step: at most this many jobs
-- Returns     {bound, more (1 when the step was full), stale, released ids, oldest lease first}
-- @include common
local worker, step = ARGV[2], tonumber(ARGV[4])
local held = held_key(worker)
local bound = ARGV[3]
if bound == '' then bound = redis.call('HGET', META, 'fence') or '0' end
local ids = redis.call('ZREVRANGEBYSCORE', held, bound, '-inf', 'LIMIT', 0, step)
local now = now_ms()
local departures = new_departures()
local released, gone = {}, {}
for _, id in ipairs(ids) do -- newest first, each pushed to the front: the oldest ends first
  local key = job_key(id)
  local job = redis.call('HMGET', key, 'state', 'worker', 'priority')
  if job[1] == 'active' and job[2] == worker then
    leave_ledger(departures, id, key, worker)
    redis.call('HSET', key, 'state', 'waiting', 'redeliver', 1, 'updated_at', now)
    push_waiting(id, number_or(job[3], 0), true)
    released[#released + 1] = id
  else
    gone[#gone + 1] = id
  end
end
detach(departures)
if #gone > 0 then
  stale_entries = #gone
  call_chunked('ZREM', held, gone)
  if redis.call('ZCARD', held) == 0 then redis.call('SREM', WORKERS, worker) end
end
wake_waiters(#released)
local reply = {bound, #ids == step and 1 or 0, stale_entries}
for i = #released, 1, -1 do reply[#reply + 1] = released[i] end
return reply
