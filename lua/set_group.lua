-- Set or clear a group's own cap on its jobs in the ledger (without one, the queue's META
-- "group_max_in_flight" applies). A group that has room now and waiting jobs goes back into RING
-- at once (and long polls are woken); one over its new cap leaves RING at its next turn.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes META (the first group of a
--             queue), publishes on WAKE; derives the group's hash and line, RING and GROUPS from
--             the prefix
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     group name
-- ARGV[3]     max in flight (>= 1), or "" for none of its own
-- Returns     1
-- @include base
-- @include groups
local group, max = ARGV[2], ARGV[3]
local g = groups()
local key = g.key(group)
local fields = g.fields(group)
if max ~= '' then
  if not (fields[1] or fields[2] or fields[3]) then g.new(group) end
  redis.call('HSET', key, 'max', max)
  fields[2] = max
else
  redis.call('HDEL', key, 'max')
  fields[2] = false
end
local waiting = redis.call('ZCARD', g.wait_key(group))
wake_waiters(g.ring(group, fields, waiting))
g.forget_if_idle(group, fields, waiting)
return 1
