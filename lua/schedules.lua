-- A page of a queue's schedules by name. Reads only.
-- KEYS[1..11] the queue's keys (see include/base.lua); reads SCHEDULES and the schedules'
--             hashes (derived from the prefix)
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     the page starts after this name ("": from the first)
-- ARGV[3]     at most this many schedules
-- Returns     {more (1: schedules follow the page), then per schedule: name, its field count,
--             its hash as HGETALL flattens it}
-- @include schedule
local after, limit = ARGV[2], tonumber(ARGV[3])
local from = after == '' and '-' or '(' .. after
local names = redis.call('ZRANGE', SCHEDULES, from, '+', 'BYLEX', 'LIMIT', 0, limit + 1)
local reply = {#names > limit and 1 or 0}
for i = 1, math.min(#names, limit) do
  local fields = redis.call('HGETALL', schedule_key(names[i]))
  reply[#reply + 1] = names[i]
  reply[#reply + 1] = #fields
  for j = 1, #fields do reply[#reply + 1] = fields[j] end
end
return reply
