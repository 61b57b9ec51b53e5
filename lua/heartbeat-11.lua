-- Renew a lease: the lock's TTL and the deadline index move to now + lease_ms. Renewing again
-- (a re-sent call) renews again: the answer is the new expiry, as the first one's was.
-- KEYS[1..11] the queue's keys (see include/common.lua); writes DEADLINES, DUE, the job's lock
--             and hash
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     job id
-- ARGV[3]     lease id
-- ARGV[4]     lease_ms; 0 = the lease's own length
-- Returns     {1, lease_expires_at}, {-1} job not found, {-2} lease lost
-- @include common
local id, lease_id = ARGV[2], ARGV[3]
local key = job_key(id)
local job = redis.call('HMGET', key, 'state', 'worker', 'lease_ms')
if not job[1] then return {JOB_NOT_FOUND} end
if not holds_lease(id, lease_id, job[2]) then return {LEASE_LOST} end
local lease_ms = tonumber(ARGV[4])
if lease_ms == 0 then lease_ms = tonumber(job[3]) end
local now = now_ms()
local expires_at = now + lease_ms
redis.call('PEXPIRE', lock_key(id), lease_ms)
redis.call('ZADD', DEADLINES, expires_at, id)
sweep_needed_by(expires_at)
redis.call('HSET', key, 'lease_expires_at', expires_at, 'updated_at', now)
return {1, expires_at}
