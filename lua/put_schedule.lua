-- Create or replace a schedule: a compare-and-set against the version the service read before it
-- computed the schedule's next run (service/echomq_http/core/schedules.py), so neither a concurrent PUT nor a run
-- fired in between is overwritten with a decision made on what they changed.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes the schedule's hash, SCHEDULES,
--             TIMETABLE (derived from the prefix) and DUE
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     schedule name
-- ARGV[3]     the version read: "0" when there was no such schedule
-- ARGV[4]     its next run (ms), "" for none (paused, ended)
-- ARGV[5]     the Redis time (ms) the service read with the schedule and computed from: the
--             schedule's updated_at (and created_at), so a new grid starts exactly every_ms
--             after its created_at
-- ARGV[6]     n: how many field/value pairs follow
-- ARGV[7..]   n field/value pairs to set, then the names of fields to delete (options not given)
-- Returns     {created (1: new, 0: replaced), then the schedule's hash as HGETALL flattens it},
--             or SCHEDULE_MOVED (-6): the version is no longer the one read (read again)
-- @include base
-- @include schedule
local name, expected, next_run, now, pairs_count = ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local key = schedule_key(name)
local version = redis.call('HGET', key, 'version') or '0'
if version ~= expected then return SCHEDULE_MOVED end
local fields = {'version', text(tonumber(version) + 1), 'updated_at', now}
if version == '0' then
  fields[#fields + 1] = 'created_at'
  fields[#fields + 1] = now
  fields[#fields + 1] = 'runs'
  fields[#fields + 1] = '0'
end
for i = 7, 6 + 2 * pairs_count do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', key, unpack(fields))
local absent = {}
for i = 7 + 2 * pairs_count, #ARGV do absent[#absent + 1] = ARGV[i] end
if #absent > 0 then redis.call('HDEL', key, unpack(absent)) end
redis.call('ZADD', SCHEDULES, 0, name)
set_next_run(name, key, next_run)
local reply = {version == '0' and 1 or 0}
local stored = redis.call('HGETALL', key)
for i = 1, #stored do reply[#reply + 1] = stored[i] end
return reply
