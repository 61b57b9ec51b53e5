-- Acknowledge finished jobs: each leaves the in-flight ledger (LREM) and becomes completed.
-- Acking again with the lease that completed the job answers "already completed", so a worker
-- whose response was lost can retry safely (include/ack.lua).
-- KEYS[1..11] the queue's keys (see include/base.lua); writes ACTIVE, DEADLINES, WORKERS,
--             COMPLETED, DUE, the jobs' hashes, locks and held sets
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     JSON array of [id, lease_id] pairs (at most 1000: the API's batch limit)
-- ARGV[3..]   each ack's result as raw JSON, in the same order; "" = no result
-- Returns     flat array, 2 entries per ack: code (1 completed now, 2 already completed by this
--             lease, -1 job not found, -2 lease lost) and, for code 1, how long the lease was held
--             (ms, lease to ack), else 0
-- @include base
-- @include events
-- @include ack
-- @include flows
local now = now_ms()
return finish_and_deliver(ack_jobs(cjson.decode(ARGV[2]), 3, now), now)
