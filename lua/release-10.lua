-- The holder gives a job back: it leaves the ledger and is leased next (front of its priority),
-- and this delivery does not count as an attempt.
-- KEYS[1..10] the queue's keys (see include/common.lua); writes ACTIVE, DEADLINES, WORKERS,
--             WAIT or PRIO, META, publishes on WAKE
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     job id
-- ARGV[3]     lease id
-- Returns     1 released, -1 job not found, -2 lease lost
-- @include common
local id, lease_id = ARGV[2], ARGV[3]
local key = job_key(id)
if redis.call('EXISTS', key) == 0 then return JOB_NOT_FOUND end
if not holds_lease(id, key, lease_id) then return LEASE_LOST end
leave_ledger_now(id, key)
redis.call('HSET', key, 'state', 'waiting', 'redeliver', 1, 'updated_at', now_ms())
push_waiting(id, priority_of(key), true)
wake_waiters(1)
return 1
