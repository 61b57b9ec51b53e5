-- The schedules whose next run is due, earliest first, with what the service computes the run
-- after from (fire_schedules.lua then fires them). Reads only.
-- KEYS[1..11] the queue's keys (see include/base.lua); reads TIMETABLE and the schedules'
--             hashes (derived from the prefix)
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     at most this many schedules
-- Returns     {now (ms), then 3 entries per due schedule: name, next_run_at, clock}
-- @include base
-- @include schedule
local now = now_ms()
local reply = {now}
for _, name in ipairs(redis.call('ZRANGE', TIMETABLE, '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))) do
  local s = redis.call('HMGET', schedule_key(name), 'next_run_at', 'clock')
  if s[1] and s[2] then
    reply[#reply + 1] = name
    reply[#reply + 1] = s[1]
    reply[#reply + 1] = s[2]
  end
end
return reply
