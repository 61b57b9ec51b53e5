-- Read a page of dead-lettered jobs, most recently failed first, with the total.
-- KEYS[1..11] the queue's keys (see include/common.lua); reads FAILED and the jobs' hashes
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     offset
-- ARGV[3]     limit
-- Returns     {total, {id, {field, value, ...}}, ...}: each job as its id and its hash (HGETALL)
-- @include common
local offset, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local reply = {redis.call('ZCARD', FAILED)}
for _, id in ipairs(redis.call('ZREVRANGE', FAILED, offset, offset + limit - 1)) do
  reply[#reply + 1] = {id, redis.call('HGETALL', job_key(id))}
end
return reply
