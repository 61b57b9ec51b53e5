-- A worker's session heartbeat: starts the worker's session on the queue, or renews it for
-- ttl_ms from now. A session not renewed in time lapses, and the sweep then takes the jobs its
-- worker holds as it takes those of expired leases (sweep.lua). A heartbeat that comes after
-- the session lapsed, before the sweep took its jobs, starts a new session; the lapse still
-- takes the jobs leased up to now (its bound, lapsed_fence, is set here if no lease set it).
-- A renewal keeps the session's state (running or quiet) and started_at; info replaces the
-- stored info when given.
-- KEYS[1..11] the queue's keys (see include/base.lua); reads META, writes the due index, the
--             sessions ZSET and the worker's session hash, derived from the prefix
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     worker name
-- ARGV[3]     ttl_ms: the session lapses this many ms from now unless renewed
-- ARGV[4]     info: a JSON object's text, or "" to keep the stored one (none on a new session)
-- ARGV[5]     the calling token's id, "" or absent for none (tokens off, or an admin): the worker
--             name must not belong to another token (include/workers.lua claim_worker); it is
--             then claimed or kept for ttl_ms more
-- Returns     {session_expires_at (epoch ms), state "running"|"quiet"}, or {WORKER_OWNED} (-8)
--             when the worker name belongs to another token (nothing done). No events.
-- @include base
-- @include workers
-- @include events
-- @include due_index
local worker, ttl_ms, info = ARGV[2], tonumber(ARGV[3]), ARGV[4]
if not claim_worker(worker, ARGV[5] or '', ttl_ms) then return {WORKER_OWNED} end
local now = now_ms()
local key = session_key(worker)
local session = redis.call('HMGET', key, 'state', 'expires_at', 'lapsed_fence')
local state = 'running'
local pending = session[3]
if session[2] and tonumber(session[2]) > now then
  state = session[1] or state
else
  if session[2] and not pending then
    pending = redis.call('HGET', META, 'fence') or '0'
    redis.call('HSET', key, 'lapsed_fence', pending)
  end
  redis.call('HSET', key, 'state', state, 'started_at', now)
  if info == '' then redis.call('HDEL', key, 'info') end
end
local expires_at = now + ttl_ms
redis.call('HSET', key, 'last_seen_at', now, 'expires_at', expires_at, 'ttl_ms', ttl_ms)
if info ~= '' then redis.call('HSET', key, 'info', info) end
-- A lapse not yet swept is due now; else the session is due when it would lapse.
local due_at = pending and now or expires_at
redis.call('ZADD', SESSIONS, due_at, worker)
sweep_needed_by(due_at)
return finish({expires_at, state}, now)
