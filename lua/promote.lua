-- Run a delayed job now: it leaves DELAYED for the back of its priority's line (a grouped job:
-- its group's line), exactly as the sweep moves a due job (include/waiting.lua promote_due), and
-- the queue's long polls are woken. The queue's entry in the due index is left as it is: at
-- worst its next sweep finds nothing to do, and sets it anew.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes DELAYED, WAIT or PRIO, META
--             (priority sequences), publishes on WAKE; derives the job's hash, and a grouped
--             job's line, group hash, RING and GROUPS (include/groups.lua), from the prefix
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     job id
-- Emits promoted.
-- Returns     1 promoted, -1 job not found, -7 not delayed (the job is in another state)
-- @include base
-- @include events
-- @include waiting
local id = ARGV[2]
local key = job_key(id)
local job = redis.call('HMGET', key, 'state', 'priority', 'group')
if not job[1] then return JOB_NOT_FOUND end
if job[1] ~= 'delayed' then return NOT_DELAYED end
local now = now_ms()
redis.call('ZREM', DELAYED, id)
delayed_to_waiting(id, key, job, now)
wake_waiters(1)
emit('promoted', id, '')
return finish(1, now)
