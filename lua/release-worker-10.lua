-- An operator declares a worker dead: every job it holds (lease live or expired) goes back to
-- the front of waiting without spending an attempt; those leases are lost.
-- KEYS[1..10] the queue's keys (see include/common.lua); writes ACTIVE, DEADLINES, WORKERS,
--             WAIT or PRIO, META, publishes on WAKE; reads the worker's holds set
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     worker name
-- Returns     array of the released job ids, oldest lease first
-- @include common
local ids = redis.call('SMEMBERS', holds_key(ARGV[2]))
local now = now_ms()
local leased_at = {}
for _, id in ipairs(ids) do
  leased_at[id] = tonumber(redis.call('HGET', job_key(id), 'leased_at'))
end
table.sort(ids, function(a, b) return leased_at[a] < leased_at[b] end)
-- Push the newest first so that the oldest ends up first in line.
for i = #ids, 1, -1 do
  local id = ids[i]
  local key = job_key(id)
  leave_ledger(id, key)
  redis.call('HSET', key, 'state', 'waiting', 'redeliver', 1, 'updated_at', now)
  push_waiting(id, tonumber(redis.call('HGET', key, 'priority')), true)
end
wake_waiters(#ids)
return ids
