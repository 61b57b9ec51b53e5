-- Look for a text in the payloads and errors of one state's jobs, one bounded step at a time (the
-- dashboard's search; its "scan more" is the next step): from an offset in the state's order,
-- read at most `budget` entries and keep the jobs whose payload or error holds the text (plain,
-- case-insensitive: the caller sends it in lower case), stopping early at `limit` matches.
-- Orders as list-jobs: failed, completed and cancelled most recently finished first, delayed by
-- due time. An entry whose job left the state meanwhile is passed over.
-- KEYS[1..11] the queue's keys (see include/base.lua); reads only: FAILED, COMPLETED, DELAYED or
--             PREFIX .. "@CANCELLED_NAME@", and the jobs' hashes (derived from the prefix)
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     state: failed, completed, cancelled or delayed
-- ARGV[3]     the text, in lower case (not empty)
-- ARGV[4]     offset: the entries earlier steps read
-- ARGV[5]     budget: at most this many entries read by this step (and the step ends once it
--             has read SEARCH_BYTES of payloads and errors: big payloads never make a long step)
-- ARGV[6]     limit: at most this many matches
-- Returns     {next offset, entries in the state now, id, id, ...}: the next step starts at the
--             next offset; when it reaches the count the scan is done
-- @include base
local state, needle = ARGV[2], ARGV[3]
local offset, budget, limit = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local index = ({failed = FAILED, completed = COMPLETED, delayed = DELAYED,
  cancelled = PREFIX .. '@CANCELLED_NAME@'})[state]
local ids
if state == 'delayed' then
  ids = redis.call('ZRANGE', index, offset, offset + budget - 1)
else
  ids = redis.call('ZREVRANGE', index, offset, offset + budget - 1)
end
local SEARCH_BYTES = 4194304
local reply = {offset, redis.call('ZCARD', index)}
local read_bytes = 0
for i, id in ipairs(ids) do
  reply[1] = offset + i
  local fields = redis.call('HMGET', job_key(id), 'state', 'payload', 'error')
  if fields[1] == state then
    read_bytes = read_bytes + #fields[2] + (fields[3] and #fields[3] or 0)
    if string.find(string.lower(fields[2]), needle, 1, true)
        or (fields[3] and string.find(string.lower(fields[3]), needle, 1, true)) then
      reply[#reply + 1] = id
      if #reply - 2 >= limit then break end
    end
  end
  if read_bytes >= SEARCH_BYTES then break end
end
return reply
