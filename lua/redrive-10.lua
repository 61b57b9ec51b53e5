-- Send dead-lettered jobs back to waiting (back of the line) with their attempts reset.
-- KEYS[1..10] the queue's keys (see include/common.lua); writes FAILED, WAIT or PRIO, META,
--             publishes on WAKE
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     JSON array of ids to redrive; ids not in FAILED are skipped. An empty array means
--             the oldest failed jobs, up to ARGV[3]
-- ARGV[3]     at most this many jobs when ARGV[2] is empty
-- Returns     array of the redriven ids
-- @include common
local ids = cjson.decode(ARGV[2])
if #ids == 0 then
  ids = redis.call('ZRANGE', FAILED, 0, tonumber(ARGV[3]) - 1)
end
local now = now_ms()
local redriven = {}
for _, id in ipairs(ids) do
  if redis.call('ZREM', FAILED, id) == 1 then
    local key = job_key(id)
    redis.call('HSET', key, 'state', 'waiting', 'attempt', 0, 'updated_at', now)
    redis.call('HDEL', key, 'error', 'finished_at', 'redeliver')
    push_waiting(id, priority_of(key), false)
    redriven[#redriven + 1] = id
  end
end
wake_waiters(#redriven)
return redriven
