-- Read a page of the in-flight ledger, oldest lease first (the ledger's right end).
-- KEYS[1..11] the queue's keys (see include/base.lua); reads ACTIVE, the jobs' hashes and,
--             with a worker filter, that worker's held set (ordered by fence: by lease)
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     offset (jobs to skip, oldest first)
-- ARGV[3]     limit
-- ARGV[4]     worker name to filter by, or "" for all
-- Returns     flat array, 5 entries per job: id, worker, attempt, leased_at, lease_expires_at
-- @include base
-- @include workers
local offset, limit, worker = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local ids
if worker == '' then
  ids = redis.call('LRANGE', ACTIVE, -(offset + limit), -(offset + 1))
  -- LRANGE gives newest first; the view is oldest first.
  local n = #ids
  for i = 1, math.floor(n / 2) do ids[i], ids[n - i + 1] = ids[n - i + 1], ids[i] end
else
  ids = redis.call('ZRANGE', held_key(worker), offset, offset + limit - 1)
end
local reply = {}
for _, id in ipairs(ids) do
  local job = redis.call('HMGET', job_key(id), 'worker', 'attempt', 'leased_at', 'lease_expires_at')
  if job[1] then
    reply[#reply + 1] = id
    for j = 1, 4 do reply[#reply + 1] = job[j] end
  end
end
return reply
