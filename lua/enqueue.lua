-- Enqueue a batch of jobs. An id that is already stored keeps its job unchanged (idempotent).
-- KEYS[1..11] the queue's keys (see include/base.lua); writes META (priority sequences),
--             WAIT or PRIO or DELAYED (and DUE for a delayed job), publishes on WAKE; derives
--             each job's hash, and a grouped job's line, group hash, RING and GROUPS, from the
--             prefix.
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     JSON array (at most 1000: the API's batch limit), one object per job: {id, name, priority, delay_ms, max_attempts,
--             backoff_type: "fixed"|"exponential", backoff_ms, traceparent?, group?}; ids the client did
--             not choose are random ones made by the service; traceparent is the producer's W3C
--             trace context, handed to the job's workers; a job with a group waits in its
--             group's line (include/groups.lua)
-- ARGV[3..]   the jobs' payloads as raw JSON, in the same order
-- ARGV[#jobs + 3] optional: "new" = a queue with no keys yet is not started here: the script
--             answers {NEW_QUEUE} and stores nothing, so that the service admits the queue to
--             its registry first (EMQ_MAX_QUEUES, lua/admit_queue.lua) and calls again
--             without it; absent, the jobs are stored either way
--             Emits enqueued per job stored; counts them in the history.
-- Returns     {first, then 3 entries per job: id, state ("waiting"|"delayed" or the stored job's
--             state), created (1 = stored now, 0 = the id existed)}; first = 1 when the queue
--             had no keys before (its first job since it was created or deleted);
--             or {NEW_QUEUE (-9)}: the queue had no keys and ARGV[#jobs + 3] is "new"
-- @include base
-- @include history
-- @include events
-- @include retention
-- @include store
local jobs = cjson.decode(ARGV[2])
local now = now_ms()
local first = redis.call('EXISTS', META, WAIT, PRIO, DELAYED, ACTIVE, COMPLETED, FAILED, CANCELLED) == 0
if first and ARGV[#jobs + 3] == 'new' then return {NEW_QUEUE} end
local reply = {first and 1 or 0}
local leasable, created_count = 0, 0
local unprioritised = {} -- priority 0: pushed onto WAIT in one LPUSH, in order, at the end
for i, job in ipairs(jobs) do
  local state, created = store_job(job.id, job, ARGV[i + 2], now, nil, unprioritised)
  if created == 1 then
    created_count = created_count + 1
    -- unprioritised jobs are counted once they are pushed, below
    if state == 'waiting' and (job.priority ~= 0 or job.group) then leasable = leasable + 1 end
  end
  reply[#reply + 1] = job.id
  reply[#reply + 1] = state
  reply[#reply + 1] = created
end
if #unprioritised > 0 then
  call_chunked('LPUSH', WAIT, unprioritised)
  leasable = leasable + #unprioritised
end
wake_waiters(leasable)
count_history('enqueued', created_count)
return finish(reply, now)
