-- An operator declares a worker dead: every job it holds (lease live or expired) goes back to
-- the front of waiting without spending an attempt; those leases are lost.
-- KEYS[1..10] the queue's keys (see include/common.lua); writes ACTIVE, DEADLINES, WORKERS,
--             WAIT or PRIO, META, publishes on WAKE; reads the worker's holds set
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     worker name
-- Returns     array of the released job ids, oldest lease first (by fence: leases in one
--             millisecond keep their order)
-- @include common
local ids = redis.call('SMEMBERS', holds_key(ARGV[2]))
local now = now_ms()
local fence = {}
for _, id in ipairs(ids) do
  fence[id] = tonumber(redis.call('HGET', job_key(id), 'fence'))
end
table.sort(ids, function(a, b) return fence[a] < fence[b] end)
-- Push the newest first so that the oldest ends up first in line.
local departures = new_departures()
for i = #ids, 1, -1 do
  local id = ids[i]
  local key = job_key(id)
  leave_ledger(departures, id, key, ARGV[2])
  redis.call('HSET', key, 'state', 'waiting', 'redeliver', 1, 'updated_at', now)
  push_waiting(id, priority_of(key), true)
end
detach(departures)
wake_waiters(#ids)
return ids
