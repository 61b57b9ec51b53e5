-- Read a page of dead-lettered jobs' ids, most recently failed first, with the total and each
-- job's payload size. The hashes themselves are read by the caller in chunks bounded by those
-- sizes (service/echomq_http/store/chunked_read.py): a page of large jobs in one reply would hold Redis while it
-- builds hundreds of MB, and the caller's shared connection while they cross it.
-- KEYS[1..11] the queue's keys (see include/base.lua); reads FAILED and the jobs' payload sizes
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     offset
-- ARGV[3]     limit
-- Returns     {total, id, payload_bytes, id, payload_bytes, ...}
-- @include base
local offset, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local reply = {redis.call('ZCARD', FAILED)}
for _, id in ipairs(redis.call('ZREVRANGE', FAILED, offset, offset + limit - 1)) do
  reply[#reply + 1] = id
  reply[#reply + 1] = redis.call('HSTRLEN', job_key(id), 'payload')
end
return reply
