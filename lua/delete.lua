-- Delete a job that is not leased, with its keys.
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
local id = ARGV[2]
local key = job_key(id)
local job = redis.call('HMGET', key, 'state', 'group')
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
elseif state == 'completed' then
  redis.call('ZREM', COMPLETED, id)
elseif state == 'cancelled' then
  redis.call('ZREM', CANCELLED, id)
else
  redis.call('ZREM', FAILED, id)
end
redis.call('DEL', key)
emit('deleted', id, '')
return finish(1, now_ms())
