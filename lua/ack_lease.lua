-- Acknowledge finished jobs, then lease the next ones, in one call: an ack (or ack-many) with
-- lease_next. Each part does exactly what the ack and lease scripts do (include/ack.lua,
-- include/lease.lua); together they cost the worker's request one round trip to Redis, not two.
-- KEYS[1..11] the queue's keys (see include/base.lua)
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     JSON array of [id, lease_id] pairs (at most 1000: the API's batch limit)
-- ARGV[3]     the lease request, packed as the lease script's ARGV[2] (its owner is checked
--             before the acks)
-- ARGV[4]     "1": lease only if every ack was taken (a single ack that fails leases nothing);
--             "0": lease whatever the acks' codes (ack-many)
-- ARGV[5..]   each ack's result as raw JSON, in the same order as ARGV[2]; "" = no result
-- Returns     the ack script's reply (2 entries per ack), then the lease script's reply (stale,
--             retry_after_ms, 10 entries per job), or nothing more when it did not lease;
--             {WORKER_OWNED} (-8) alone when the worker name belongs to another token: no ack
--             taken, nothing leased
-- @include base
-- @include workers
-- @include events
-- @include ack
-- @include lease
-- @include flows
local ask = cmsgpack.unpack(ARGV[3])
if not claim_worker(ask.worker, ask.owner, ask.lease_ms) then return {WORKER_OWNED} end
local now = now_ms()
-- META read once for both parts; the worker acking its jobs stays in WORKERS while it leases
-- again, and leaves only if it leased nothing and holds nothing.
local meta = read_queue_meta()
local reply, deferred = ack_jobs(cjson.decode(ARGV[2]), 5, now, meta, ask.worker)
local leased = nil
if ARGV[4] ~= '1' or all_taken(reply) then
  leased = lease_jobs(ask, now, meta, deferred)
  for i = 1, #leased do reply[#reply + 1] = leased[i] end
end
if deferred and (not leased or #leased == 2) then worker_left(ask.worker) end
return finish_and_deliver(reply, now)
