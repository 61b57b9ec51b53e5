-- Read a queue's pause flag and the number of jobs in each state, as one consistent snapshot.
-- Grouped waiting jobs are counted by META "group_waiting" (include/common.lua, groups).
-- KEYS[1..11] the queue's keys (see include/common.lua); reads only
-- ARGV[1]     key prefix "emq:{queue}:"
-- Returns     {paused (0|1), waiting, delayed, active, completed, failed, cancelled}
-- @include common
return {
  redis.call('HEXISTS', META, 'paused'),
  redis.call('LLEN', WAIT) - tonumber(redis.call('HGET', META, 'wait_tombstones') or 0) + redis.call('ZCARD', PRIO)
    + tonumber(redis.call('HGET', META, 'group_waiting') or 0),
  redis.call('ZCARD', DELAYED),
  redis.call('LLEN', ACTIVE),
  redis.call('ZCARD', COMPLETED),
  redis.call('ZCARD', FAILED),
  redis.call('ZCARD', CANCELLED),
}
