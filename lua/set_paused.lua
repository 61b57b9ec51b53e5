-- Pause or resume leasing from a queue. Resuming wakes the queue's long-poll waiters.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes META, publishes on WAKE
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     "1" = pause, "0" = resume
-- Returns     1 paused, 0 not paused
-- @include base
-- @include events
-- @include waiting
-- Emits paused or resumed when the flag changes.
if ARGV[2] == '1' then
  if redis.call('HSET', META, 'paused', 1) == 1 then emit('paused', '-', '') end
  return finish(1, now_ms())
end
if redis.call('HDEL', META, 'paused') == 1 then
  wake_waiters(waiting_count())
  emit('resumed', '-', '')
end
return finish(0, now_ms())
