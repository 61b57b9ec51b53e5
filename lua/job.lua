-- Read a job and the number of its queue's last event together, for a wait on the job's
-- outcome: every event numbered after the answer happened after this view of the job.
-- KEYS[1..11] the queue's keys (see include/base.lua); reads META and the job's hash
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     job id
-- Returns     {last event number (0: none yet), then the job's hash as HGETALL flattens it
--             (nothing: no such job)}
-- @include base
local reply = {tonumber(redis.call('HGET', META, 'event_seq') or 0)}
local fields = redis.call('HGETALL', job_key(ARGV[2]))
for i = 1, #fields do reply[#reply + 1] = fields[i] end
return reply
