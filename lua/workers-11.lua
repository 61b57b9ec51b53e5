-- Read who holds what: each worker with a job in the ledger and the ids it holds.
-- KEYS[1..11] the queue's keys (see include/common.lua); reads WORKERS and the held sets
-- ARGV[1]     key prefix "emq:{queue}:"
-- Returns     array of {worker, {id, ...}} pairs, workers sorted by name, ids sorted
-- @include common
local workers = redis.call('SMEMBERS', WORKERS)
table.sort(workers)
local reply = {}
for i, worker in ipairs(workers) do
  local ids = redis.call('ZRANGE', held_key(worker), 0, -1)
  table.sort(ids)
  reply[i] = {worker, ids}
end
return reply
