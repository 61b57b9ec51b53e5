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
-- Returns     flat array, 10 entries per leased job: id, name, payload, attempt, max_attempts,
--             lease_id, lease_expires_at (ms), fence, enqueued_at (ms), traceparent (nil when the
--             producer sent none); empty when paused or nothing waits.
--             The fence comes from one counter per queue (META "fence"), so it grows with every
--             lease of a job, never goes back even when an id is reused, and orders leases.
-- @include common
if redis.call('HEXISTS', META, 'paused') == 1 then return {} end
local worker, lease_ms, max_jobs = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
promote_due(now, max_jobs)
local expires_at = now + lease_ms
local holds = holds_key(worker)
local fence_base = tonumber(redis.call('HGET', META, 'fence') or 0)
local reply = {}
local leased = 0
for i = 1, max_jobs do
  local id
  local top = redis.call('ZPOPMIN', PRIO)
  if top[1] then
    id = top[1]
    redis.call('LPUSH', ACTIVE, id)
  else
    id = redis.call('LMOVE', WAIT, ACTIVE, 'RIGHT', 'LEFT')
    if not id then break end
  end
  leased = i
  local key = job_key(id)
  local lease_id = string.sub(ARGV[5], (i - 1) * @LEASE_ID_CHARS@ + 1, i * @LEASE_ID_CHARS@)
  local attempt
  if redis.call('HDEL', key, 'redeliver') == 1 then
    attempt = tonumber(redis.call('HGET', key, 'attempt')) -- a released delivery is not counted
  else
    attempt = redis.call('HINCRBY', key, 'attempt', 1)
  end
  local fence = fence_base + i
  redis.call('SET', lock_key(id), lease_id .. ':' .. worker, 'PX', lease_ms)
  redis.call('ZADD', DEADLINES, expires_at, id)
  redis.call('SADD', holds, id)
  redis.call('HSET', key, 'state', 'active', 'worker', worker, 'lease_id', lease_id,
    'lease_ms', lease_ms, 'leased_at', now, 'lease_expires_at', expires_at, 'fence', fence,
    'updated_at', now)
  local job = redis.call('HMGET', key, 'name', 'payload', 'max_attempts', 'created_at', 'traceparent')
  reply[#reply + 1] = id
  reply[#reply + 1] = job[1]
  reply[#reply + 1] = job[2]
  reply[#reply + 1] = attempt
  reply[#reply + 1] = tonumber(job[3])
  reply[#reply + 1] = lease_id
  reply[#reply + 1] = expires_at
  reply[#reply + 1] = fence
  reply[#reply + 1] = tonumber(job[4])
  reply[#reply + 1] = job[5]
end
if leased > 0 then
  redis.call('HSET', META, 'fence', fence_base + leased)
  redis.call('SADD', WORKERS, worker)
end
return reply
