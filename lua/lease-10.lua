-- Lease up to max_jobs waiting jobs to a worker. Each job moves atomically into the in-flight
-- ledger ACTIVE (left end) under its lock "<lease_id>:<worker>" with a PX TTL of lease_ms.
-- Due delayed jobs are promoted first, so they are leasable at once.
-- KEYS[1..10] the queue's keys (see include/common.lua); derives job hashes, locks and the
--             worker's holds set from the prefix
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     worker name
-- ARGV[3]     lease_ms
-- ARGV[4]     max_jobs
-- ARGV[5]     lease ids: max_jobs random tokens of @LEASE_ID_CHARS@ characters, concatenated
-- Returns     flat array, 10 entries per leased job: id, name (nil when it has none), payload,
--             attempt, max_attempts, lease_id, lease_expires_at (ms), fence, enqueued_at (ms),
--             traceparent (nil when the producer sent none); empty when paused or nothing waits.
--             The fence comes from one counter per queue (META "fence"), so it grows with every
--             lease of a job, never goes back even when an id is reused, and orders leases.
-- @include common
if redis.call('HEXISTS', META, 'paused') == 1 then return {} end
local worker, lease_ms, max_jobs = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
promote_due(now, max_jobs)

-- The jobs to lease, in order: the highest priorities first, then the oldest (right) end of WAIT.
-- Taken from their keys in a few commands for the whole batch rather than a few per job.
local ids = {}
if redis.call('EXISTS', PRIO) == 1 then
  local top = redis.call('ZPOPMIN', PRIO, max_jobs)
  for i = 1, #top, 2 do ids[#ids + 1] = top[i] end
end
local wanted = max_jobs - #ids
if wanted > 0 then
  local oldest = redis.call('LRANGE', WAIT, -wanted, -1)
  if #oldest > 0 then
    redis.call('LTRIM', WAIT, 0, -(#oldest + 1))
    for i = #oldest, 1, -1 do ids[#ids + 1] = oldest[i] end
  end
end
if #ids == 0 then return {} end

local expires_at = now + lease_ms
local fence_base = tonumber(redis.call('HGET', META, 'fence') or 0)
local deadlines = {}
local reply = {}
for i, id in ipairs(ids) do
  local key = job_key(id)
  local lease_id = string.sub(ARGV[5], (i - 1) * @LEASE_ID_CHARS@ + 1, i * @LEASE_ID_CHARS@)
  local fence = fence_base + i
  local job = redis.call('HMGET', key, 'name', 'payload', 'max_attempts', 'created_at', 'traceparent',
    'attempt', 'redeliver')
  local attempt = number_or(job[6], 0)
  if job[7] then
    redis.call('HDEL', key, 'redeliver') -- a released delivery is not counted
  else
    attempt = attempt + 1
  end
  redis.call('HSET', key, 'state', 'active', 'attempt', attempt, 'worker', worker,
    'lease_id', lease_id, 'lease_ms', lease_ms, 'leased_at', now, 'lease_expires_at', expires_at,
    'fence', fence, 'updated_at', now)
  redis.call('SET', lock_key(id), lease_id .. ':' .. worker, 'PX', lease_ms)
  deadlines[2 * i - 1] = expires_at
  deadlines[2 * i] = id
  reply[#reply + 1] = id
  reply[#reply + 1] = job[1]
  reply[#reply + 1] = job[2]
  reply[#reply + 1] = attempt
  reply[#reply + 1] = number_or(job[3], DEFAULT_MAX_ATTEMPTS)
  reply[#reply + 1] = lease_id
  reply[#reply + 1] = expires_at
  reply[#reply + 1] = fence
  reply[#reply + 1] = tonumber(job[4])
  reply[#reply + 1] = job[5]
end
-- Newest lease on the left, in leasing order, as one LMOVE per job would have left them.
redis.call('LPUSH', ACTIVE, unpack(ids))
redis.call('ZADD', DEADLINES, unpack(deadlines))
redis.call('SADD', holds_key(worker), unpack(ids))
redis.call('HSET', META, 'fence', fence_base + #ids)
redis.call('SADD', WORKERS, worker)
return reply
