-- Quiet a worker: its live session's state becomes "quiet", so that its lease requests (and its
-- acks' lease_next) lease nothing until the session ends (include/lease.lua), and its session
-- heartbeats answer state "quiet". Idempotent.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes the worker's session hash,
--             derived from the prefix
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     worker name
-- Returns     1 quiet; -4 (NO_SESSION) the worker has no live session. No events.
-- @include base
-- @include workers
-- @include events
local key = session_key(ARGV[2])
local now = now_ms()
local expires_at = redis.call('HGET', key, 'expires_at')
if not expires_at or tonumber(expires_at) <= now then return NO_SESSION end
redis.call('HSET', key, 'state', 'quiet')
return finish(1, now)
