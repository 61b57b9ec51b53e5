-- Read one schedule, with the Redis time (a PUT computes the next run from it). Reads only.
-- KEYS[1..11] the queue's keys (see include/base.lua); reads the schedule's hash (derived from
--             the prefix)
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     schedule name
-- Returns     {now (ms), then the schedule's hash as HGETALL flattens it (nothing: no such one)}
-- @include base
-- @include schedule
local reply = {now_ms()}
local fields = redis.call('HGETALL', schedule_key(ARGV[2]))
for i = 1, #fields do reply[#reply + 1] = fields[i] end
return reply
