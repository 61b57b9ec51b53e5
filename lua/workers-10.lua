-- Read who holds what: each worker with a job in the ledger and the ids it holds.
-- KEYS[1..10] the queue's keys (see include/common.lua); reads WORKERS and the holds sets
-- ARGV[1]     key prefix "emq:{queue}:"
-- Returns     array of {worker, {id, ...}} pairs, workers sorted by name
-- @include common
local workers = redis.call('SMEMBERS', WORKERS)
table.sort(workers)
local reply = {}
for i, worker in ipairs(workers) do
  local ids = redis.call('SMEMBERS', holds_key(worker))
  table.sort(ids)
  reply[i] = {worker, ids}
end
return reply
