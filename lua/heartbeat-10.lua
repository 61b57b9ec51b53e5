-- Renew a lease: the lock's TTL and the deadline index move to now + lease_ms.
-- KEYS[1..10] the queue's keys (see include/common.lua); writes DEADLINES, the job's lock and hash
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     job id
-- ARGV[3]     lease id
-- ARGV[4]     lease_ms; 0 = the lease's own length
-- Returns     {1, lease_expires_at}, {-1} job not found, {-2} lease lost
-- @include common
local id, lease_id = ARGV[2], ARGV[3]
local key = job_key(id)
if redis.call('EXISTS', key) == 0 then return {JOB_NOT_FOUND} end
if not holds_lease(id, key, lease_id) then return {LEASE_LOST} end
local lease_ms = tonumber(ARGV[4])
if lease_ms == 0 then lease_ms = tonumber(redis.call('HGET', key, 'lease_ms')) end
local now = now_ms()
local expires_at = now + lease_ms
redis.call('PEXPIRE', lock_key(id), lease_ms)
redis.call('ZADD', DEADLINES, expires_at, id)
redis.call('HSET', key, 'lease_expires_at', expires_at, 'updated_at', now)
return {1, expires_at}
