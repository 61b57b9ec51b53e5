-- Write a queue's settings (PUT /v1/queues/{queue}/settings): the whole set at once, each one a
-- field of META, removed when it takes its default (no limit, the service's retention, events
-- on). Scripts read them from META on every call, so every replica follows at once.
-- A cap raised or removed (max_in_flight, group_max_in_flight, rate_limit) wakes the queue's long
-- polls, as jobs may be leasable now; a rate limit removed drops its log (the key
-- PREFIX .. "@RATE_NAME@", include/lease.lua); a retention changed brings the queue's sweep
-- forward to now, where it sets the queue's next due time by the new retention.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes META, the due index, publishes
--             on WAKE
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     JSON object of the settings not at their default: max_in_flight,
--             group_max_in_flight, rate_max and rate_per_ms (both or neither), max_stalls,
--             events_off (1), completed_retention_s, failed_retention_s; integers, checked by the
--             service (service/echomq_http/api/schemas.py QueueSettings)
-- Returns     1 when a cap was raised or removed (long polls woken), else 0
-- Emits       nothing
-- @include base
-- @include events
-- @include due_index
-- @include waiting
local FIELDS = {'max_in_flight', 'group_max_in_flight', 'rate_max', 'rate_per_ms', 'max_stalls', 'events_off',
  'completed_retention_s', 'failed_retention_s'}
local now = now_ms()
local wanted = cjson.decode(ARGV[2])
local was = {}
local stored = redis.call('HMGET', META, unpack(FIELDS))
for i, field in ipairs(FIELDS) do was[field] = tonumber(stored[i]) end

local set, unset = {}, {}
for _, field in ipairs(FIELDS) do
  local value = wanted[field]
  if value == nil then
    unset[#unset + 1] = field
  else
    set[#set + 1] = field
    set[#set + 1] = text(value)
  end
end
if #set > 0 then redis.call('HSET', META, unpack(set)) end
if #unset > 0 then redis.call('HDEL', META, unpack(unset)) end

-- A cap that was there and is now higher or gone.
local function raised(field)
  return was[field] ~= nil and (wanted[field] == nil or wanted[field] > was[field])
end
local rate_gone = was.rate_max ~= nil and wanted.rate_max == nil
if rate_gone then
  redis.call('DEL', PREFIX .. '@RATE_NAME@')
  redis.call('HDEL', META, 'rate_used')
end
local rate_raised = rate_gone or raised('rate_max') or (was.rate_per_ms ~= nil and wanted.rate_per_ms ~= nil
  and wanted.rate_per_ms < was.rate_per_ms)

if was.completed_retention_s ~= wanted.completed_retention_s or was.failed_retention_s ~= wanted.failed_retention_s then
  sweep_needed_by(now)
end

local woken = 0
if raised('max_in_flight') or raised('group_max_in_flight') or rate_raised then
  redis.call('HDEL', META, 'room_wanted')
  wake_waiters(waiting_count())
  woken = 1
end
return finish(woken, now)
