-- Make a schedule's job now, outside its timetable: next_run_at, runs and run_limit are not
-- touched; last_job_id is this job.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes the schedule's hash, the job's
--             (and WAIT or its group's line); publishes on WAKE
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     schedule name
-- ARGV[3]     the job's id
-- Returns     {state ("waiting", or the kept job's state when the id existed), created (1/0)},
--             or SCHEDULE_NOT_FOUND (-5)
--             Emits enqueued (with the schedule's name); counts it in the history.
-- @include base
-- @include history
-- @include events
-- @include store
-- @include schedule
local name, job_id = ARGV[2], ARGV[3]
local key = schedule_key(name)
local s = redis.call('HMGET', key, 'job', 'payload')
if not s[1] then return SCHEDULE_NOT_FOUND end
local now = now_ms()
local state, created = store_job(job_id, cjson.decode(s[1]), s[2], now, name)
redis.call('HSET', key, 'last_job_id', job_id)
wake_waiters(created)
count_history('enqueued', created)
return finish({state, created}, now)
