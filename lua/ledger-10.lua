-- Read a page of the in-flight ledger, oldest lease first (the ledger's right end).
-- KEYS[1..10] the queue's keys (see include/common.lua); reads ACTIVE, the jobs' hashes and,
--             with a worker filter, that worker's holds set
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     offset (jobs to skip, oldest first)
-- ARGV[3]     limit
-- ARGV[4]     worker name to filter by, or "" for all
-- Returns     flat array, 5 entries per job: id, worker, attempt, leased_at, lease_expires_at
-- @include common
local offset, limit, worker = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local ids
if worker == '' then
  ids = redis.call('LRANGE', ACTIVE, -(offset + limit), -(offset + 1))
  -- LRANGE gives newest first; the view is oldest first.
  local n = #ids
  for i = 1, math.floor(n / 2) do ids[i], ids[n - i + 1] = ids[n - i + 1], ids[i] end
else
  local held = redis.call('SMEMBERS', holds_key(worker))
  local fence = {}
  for _, id in ipairs(held) do
    fence[id] = tonumber(redis.call('HGET', job_key(id), 'fence'))
  end
  table.sort(held, function(a, b) return fence[a] < fence[b] end)
  ids = {}
  for i = offset + 1, math.min(#held, offset + limit) do ids[#ids + 1] = held[i] end
end
local reply = {}
for _, id in ipairs(ids) do
  local job = redis.call('HMGET', job_key(id), 'worker', 'attempt', 'leased_at', 'lease_expires_at')
  reply[#reply + 1] = id
  for j = 1, 4 do reply[#reply + 1] = job[j] end
end
return reply
