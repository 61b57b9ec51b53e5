-- Send dead-lettered jobs back to waiting (back of the line) with their attempts reset: the
-- listed ones, or one bounded step of all of them (oldest failure first, up to `limit` jobs
-- that failed no later than `bound`, so that redriving everything ends even while jobs keep
-- failing).
-- KEYS[1..11] the queue's keys (see include/base.lua); writes FAILED, WAIT or PRIO (a grouped
--             job: its group's line), META, publishes on WAKE
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     JSON array of ids to redrive (at most 1000: the API's limit); ids not in FAILED are
--             skipped, and so is a flow's parent failed by a child (child_failed: it would run
--             before its children). An empty array means a step of all of them, as below
-- ARGV[3]     limit: at most this many jobs in a step of all
-- ARGV[4]     bound (ms, a failure time) for a step of all; "" on the first step (then: now)
-- ARGV[5]     for a step of all: the entries kept by the steps before (they stay at the head of
--             FAILED up to bound, so a step starts after them)
--             Emits enqueued (with "redriven": true) per job redriven.
-- Returns     {bound, entries read (a step of all with fewer than limit is the last), entries
--             kept (parents failed by a child), redriven ids...}
-- @include base
-- @include events
-- @include waiting
local ids = cjson.decode(ARGV[2])
local now = now_ms()
local bound = ARGV[4] ~= '' and ARGV[4] or tostring(now)
if #ids == 0 then
  ids = redis.call('ZRANGEBYSCORE', FAILED, '-inf', bound, 'LIMIT', tonumber(ARGV[5]), tonumber(ARGV[3]))
end
local reply = {bound, #ids, 0}
local redriven = 0
for _, id in ipairs(ids) do
  local key = job_key(id)
  local job = redis.call('HMGET', key, 'state', 'priority', 'group', 'failed_by_child')
  -- A flow's parent failed by a child stays a dead letter: waiting again at once would run it
  -- before its children (their redrive, and its own wait for them, are still being built).
  if job[4] then
    reply[3] = reply[3] + 1
  elseif redis.call('ZREM', FAILED, id) == 1 then
    if job[1] == 'failed' then
      redis.call('HSET', key, 'state', 'waiting', 'attempt', 0, 'updated_at', now)
      redis.call('HDEL', key, 'error', 'finished_at', 'redeliver')
      push_waiting(id, number_or(job[2], 0), false, job[3])
      emit('enqueued', id, '"state":"waiting","redriven":true')
      reply[#reply + 1] = id
      redriven = redriven + 1
    else
      stale_entries = stale_entries + 1 -- an entry without its dead-lettered job: dropped
    end
  end
end
wake_waiters(redriven)
return finish(reply, now)
