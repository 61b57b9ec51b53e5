-- Read a page of a queue's groups, by name, after the previous page's last group.
-- KEYS[1..11] the queue's keys (see include/base.lua); reads only: META, GROUPS and each
--             group's hash and line (derived from the prefix)
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     the previous page's last group, "" for the first page
-- ARGV[3]     limit: at most this many groups (1..1000)
-- Returns     {the queue's group_max_in_flight ("" for none), more (1 when groups may follow),
--             then 4 entries per group: name, waiting, active, its own max ("" for none)}
-- @include base
-- @include groups
local after, limit = ARGV[2], tonumber(ARGV[3])
local g = groups()
local names = redis.call('ZRANGEBYLEX', g.GROUPS, after == '' and '-' or '(' .. after, '+', 'LIMIT', 0, limit)
local reply = {redis.call('HGET', META, 'group_max_in_flight') or '', #names == limit and 1 or 0}
for _, group in ipairs(names) do
  local fields = redis.call('HMGET', g.key(group), 'active', 'max')
  reply[#reply + 1] = group
  reply[#reply + 1] = redis.call('ZCARD', g.wait_key(group))
  reply[#reply + 1] = number_or(fields[1], 0)
  reply[#reply + 1] = fields[2] or ''
end
return reply
