-- Read a queue's pause flag and the number of jobs in each state, as one consistent snapshot.
-- KEYS[1..11] the queue's keys (see include/base.lua); reads only
-- ARGV[1]     key prefix "emq:{queue}:"
-- Returns     {paused (0|1), waiting, delayed, active, completed, failed, cancelled, waiting_children}
-- @include base
-- @include retention
-- @include waiting
-- @include flows
return {
  redis.call('HEXISTS', META, 'paused'),
  waiting_count(),
  redis.call('ZCARD', DELAYED),
  redis.call('LLEN', ACTIVE),
  redis.call('ZCARD', COMPLETED),
  redis.call('ZCARD', FAILED),
  redis.call('ZCARD', CANCELLED),
  redis.call('ZCARD', waiting_children_key()),
}
