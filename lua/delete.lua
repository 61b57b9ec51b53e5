-- Delete a job that is not leased, with its keys (a parent's children and their outcomes too).
-- KEYS[1..11] the queue's keys (see include/base.lua); writes WAIT, PRIO (or the job's group's
--             line and hash), DELAYED, COMPLETED
--             or FAILED (whichever holds the job) and deletes the job's hash
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     job id
-- Emits deleted.
-- Returns     1 deleted, -1 job not found, -3 job active
-- @include base
-- @include events
-- @include retention
-- @include groups
-- @include waiting
-- @include flows
local id = ARGV[2]
local key = job_key(id)
local job = redis.call('HMGET', key, 'state', 'group', 'parent', 'on_failure')
local state = job[1]
if not state then return JOB_NOT_FOUND end
if state == 'active' then return JOB_ACTIVE end
if state == 'waiting' then
  if job[2] then
    groups().unqueue(id, job[2])
  elseif redis.call('ZREM', PRIO, id) == 0 then
    bury_waiting(id)
  end
elseif state == 'delayed' then
  redis.call('ZREM', DELAYED, id)
elseif state == 'waiting_children' then
  redis.call('ZREM', waiting_children_key(), id)
elseif state == 'completed' then
  redis.call('ZREM', COMPLETED, id)
elseif state == 'cancelled' then
  redis.call('ZREM', CANCELLED, id)
else
  redis.call('ZREM', FAILED, id)
end
-- A child deleted before it finished counts as a failure for its parent's policy; a parent takes
-- its children's outcomes with it (its children go on, their outcomes dropped).
if job[3] and (state == 'waiting' or state == 'delayed' or state == 'waiting_children') then
  child_finished(key, id, job[3], job[4], 'd', 'deleted')
end
redis.call('DEL', job_keys(id))
redis.call('SREM', parents_key(), id)
emit('deleted', id, '')
return finish_and_deliver(1, now_ms())
