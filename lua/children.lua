-- Read a page of a parent's children in the order they were added, with what each handed it
-- (GET .../jobs/{id}/children). The children's own states are read by the service (they may live
-- in other queues and slots); this reads the parent's side only.
-- KEYS[1..11] the queue's keys (see include/base.lua); reads only the parent's hash, KIDS and
--             KIDRES (include/children.lua)
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     the parent's id
-- ARGV[3]     the position after which the page starts (0 for the first page: the previous
--             page's next position)
-- ARGV[4]     limit (1..1000)
-- Returns     {next position (0 on the last page), then 3 entries per child: "<queue> <id>",
--             status (p pending, c completed, f dead-lettered, x cancelled, d deleted before
--             finishing), the result (c) or the error (f, x, d) handed to the parent ("" none)},
--             or {JOB_NOT_FOUND (-1)} when no such job
-- @include base
-- @include children
local id, after, limit = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('EXISTS', job_key(id)) == 0 then return {JOB_NOT_FOUND} end
local page = redis.call('ZRANGE', kids_key(id), '(' .. after, '+inf', 'BYSCORE', 'LIMIT', 0, limit + 1,
  'WITHSCORES')
local count = math.min(#page / 2, limit)
local reply = {0}
if #page / 2 > limit then reply[1] = tonumber(page[2 * limit]) end
if count == 0 then return reply end
local refs = {}
for i = 1, count do refs[i] = page[2 * i - 1] end
local outcomes = redis.call('HMGET', kidres_key(id), unpack(refs))
for i, ref in ipairs(refs) do
  local _, status, _, detail = kid_outcome(outcomes[i])
  reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = ref, status, detail
end
return reply
