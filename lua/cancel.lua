-- Cancel a job. A waiting, delayed or waiting_children one is cancelled at once (kept like a dead letter, in
-- CANCELLED, its error the reason) and never leased. An active one only has its cancellation
-- requested: its heartbeats then answer cancel_requested, an ack still completes it, and a fail,
-- a release, an operator release or an expired lease make it cancelled (no retry). A finished
-- job (completed, failed, cancelled) is left as it is. Cancelling again changes nothing.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes WAIT or PRIO or DELAYED, DUE and
--             the job's hash; derives CANCELLED, EVENTS and a grouped job's line and group hash
--             (include/groups.lua) from the prefix
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     job id
-- ARGV[3]     the reason (at most 1 KiB), "" = none
-- Emits cancelled (waiting, delayed) or cancel_requested (active, the first time).
-- Returns     {state after the call, cancel_requested (0|1)}, or -1 job not found
-- @include base
-- @include events
-- @include retention
-- @include groups
-- @include waiting
-- @include flows
local id, reason = ARGV[2], ARGV[3] ~= '' and ARGV[3] or nil
local key = job_key(id)
local job = redis.call('HMGET', key, 'state', 'cancel_requested', 'group')
local state = job[1]
if not state then return JOB_NOT_FOUND end
local now = now_ms()
if state == 'waiting' then
  if job[3] then
    groups().unqueue(id, job[3])
  elseif redis.call('ZREM', PRIO, id) == 0 then
    bury_waiting(id)
  end
elseif state == 'delayed' then
  redis.call('ZREM', DELAYED, id)
elseif state == 'waiting_children' then
  redis.call('ZREM', waiting_children_key(), id) -- its children go on; their outcomes change nothing now
elseif state == 'active' then
  if not job[2] then
    if reason then
      redis.call('HSET', key, 'cancel_requested', 1, 'cancel_reason', reason, 'updated_at', now)
    else
      redis.call('HSET', key, 'cancel_requested', 1, 'updated_at', now)
    end
    emit('cancel_requested', id, '')
  end
  return finish_and_deliver({state, 1}, now)
else
  return {state, job[2] and 1 or 0}
end
cancel_job(id, key, now, reason)
return finish_and_deliver({'cancelled', 1}, now)
