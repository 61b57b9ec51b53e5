-- Delete a schedule (the jobs it made stay).
-- KEYS[1..11] the queue's keys (see include/base.lua); writes the schedule's hash, SCHEDULES
--             and TIMETABLE (derived from the prefix)
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     schedule name
-- Returns     1 deleted, or SCHEDULE_NOT_FOUND (-5)
-- @include base
-- @include schedule
local name = ARGV[2]
if redis.call('DEL', schedule_key(name)) == 0 then return SCHEDULE_NOT_FOUND end
redis.call('ZREM', SCHEDULES, name)
redis.call('ZREM', TIMETABLE, name)
return 1
