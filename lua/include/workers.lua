-- Workers: the keys of what a worker holds and of its session, and who a worker name belongs to.
-- @include base

local function held_key(worker) return PREFIX .. worker .. '@HELD_SUFFIX@' end
local function session_key(worker) return PREFIX .. worker .. '@SESSION_SUFFIX@' end
-- Live sessions by when they lapse, and lapses not yet swept (scored when they became due): the
-- sweep finds lapsed sessions with one ZRANGEBYSCORE, never a scan of the workers.
local SESSIONS = PREFIX .. '@SESSIONS_NAME@'
-- A worker name's owner record: the id of the token the name belongs to, with a PX TTL.
local function owner_key(worker) return PREFIX .. worker .. '@OWNER_SUFFIX@' end
local WORKER_OWNER_GRACE_MS = @WORKER_OWNER_GRACE_MS@
-- A worker name belongs to the token that uses it first (README, Security, "Worker names"). Its
-- owner record lasts as long as any lease or session the token made for it, plus
-- WORKER_OWNER_GRACE_MS: every lease, job heartbeat and session heartbeat of the token makes it
-- last at least keep_ms (the lease's or session's length) more, so that no other token can take
-- the name while its jobs or session are alive; then the name is free again. owner: the calling
-- token's id, "" when tokens are off or the caller is an admin (nothing checked, nothing
-- claimed). Returns false when the name belongs to another token, else true (claimed or kept).
local function claim_worker(worker, owner, keep_ms)
  if owner == '' then return true end
  local key, ttl_ms = owner_key(worker), keep_ms + WORKER_OWNER_GRACE_MS
  local current = redis.call('GET', key)
  if not current then
    redis.call('SET', key, owner, 'PX', text(ttl_ms))
  elseif current ~= owner then
    return false
  elseif redis.call('PTTL', key) < ttl_ms then
    redis.call('PEXPIRE', key, text(ttl_ms))
  end
  return true
end
-- For a call that acts for the worker without making it hold anything (ending its session).
local function owned_by_another(worker, owner)
  if owner == '' then return false end
  local current = redis.call('GET', owner_key(worker))
  return current ~= false and current ~= owner
end
local function request_key(worker, request_id) return PREFIX .. worker .. ':' .. request_id .. '@REQUEST_SUFFIX@' end
-- A request's record is marked (its first character) once a retry has been answered from it, so
-- that the service's give-back of the first answer's jobs (lease.lua, release.lua) leaves
-- them to the retry. Records otherwise start with a job id, which never contains ':'.
local ANSWERED_AGAIN = ':'
