-- Read who holds what, and who has a live session: each worker with a job in the ledger or a
-- session that has not lapsed, the ids it holds and its session.
-- KEYS[1..11] the queue's keys (see include/base.lua); reads WORKERS, the held sets, the
--             sessions ZSET and the session hashes (derived from the prefix)
-- ARGV[1]     key prefix "emq:{queue}:"
-- Returns     array of {worker, {id, ...}, session} triples, workers sorted by name, ids sorted;
--             session = {} without a live session, else {state, started_at, last_seen_at,
--             expires_at, info (JSON object text or nil)}
-- @include base
-- @include workers
local now = now_ms()
local named = {}
for _, worker in ipairs(redis.call('SMEMBERS', WORKERS)) do named[worker] = true end
for _, worker in ipairs(redis.call('ZRANGE', SESSIONS, 0, -1)) do named[worker] = true end
local workers = {}
for worker in pairs(named) do workers[#workers + 1] = worker end
table.sort(workers)
local reply = {}
for _, worker in ipairs(workers) do
  local ids = redis.call('ZRANGE', held_key(worker), 0, -1)
  table.sort(ids)
  local session = redis.call('HMGET', session_key(worker), 'state', 'started_at', 'last_seen_at', 'expires_at',
    'info')
  local live = session[4] and tonumber(session[4]) > now
  if live then
    session = {session[1], tonumber(session[2]), tonumber(session[3]), tonumber(session[4]), session[5]}
  else
    session = {}
  end
  if live or #ids > 0 then reply[#reply + 1] = {worker, ids, session} end
end
return reply
