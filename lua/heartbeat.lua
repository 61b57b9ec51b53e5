-- Renew leases: each lock's TTL and deadline index entry move to now + lease_ms. Renewing again
-- (a re-sent call) renews again: the answer is the new expiry, as the first one's was. One lease
-- (a heartbeat) or many (a batch heartbeat), each renewed or refused on its own.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes DEADLINES, DUE, the jobs' locks
--             and hashes
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     JSON array of [id, lease_id, lease_ms, progress] entries (at most 1000: the API's
--             batch limit); lease_ms 0 = the lease's own length; progress: JSON text to store on
--             the job (and emit as a progress event: up to MAX_EVENT_PROGRESS_BYTES, else the
--             event says "progress_truncated":true instead), "" = none
-- ARGV[3]     the calling token's id, "" or absent for none (tokens off, or an admin): a lease
--             of a worker whose name belongs to another token is not renewed (include/workers.lua
--             claim_worker); the name of each worker renewed for is claimed or kept for its
--             lease's length more, so that it lasts while the worker's leases do
-- Returns     flat array, 3 entries per lease, in order: code (1 renewed, -1 job not found,
--             -2 lease lost, -8 the worker name belongs to another token), for code 1 the new
--             lease_expires_at (ms) else 0, and 1 when the job's cancellation was requested
--             else 0
-- @include base
-- @include workers
-- @include events
-- @include due_index
-- @include ledger
local leases = cjson.decode(ARGV[2])
local owner = ARGV[3] or ''
local now = now_ms()
local now_text = text(now)
local deadlines = {} -- ZADD arguments: score, id, ...
local MAX_EVENT_PROGRESS_BYTES = @MAX_EVENT_PROGRESS_BYTES@
local earliest = nil -- the soonest new expiry: when the sweep may have work

-- Whether the caller may renew a lease of `worker` for lease_ms; the name's claim is made to
-- last that long once per worker and length (a batch renews many jobs of one worker).
local claimed_ms = {} -- worker -> the longest lease_ms claimed for, or false: another token's
local function may_renew_for(worker, lease_ms)
  if owner == '' then return true end
  local claimed = claimed_ms[worker]
  if claimed == false then return false end
  if claimed == nil or claimed < lease_ms then
    claimed = claim_worker(worker, owner, lease_ms) and lease_ms
    claimed_ms[worker] = claimed
  end
  return claimed ~= false
end

-- One lease: its code and new expiry (0 when it is not renewed).
local function renew(id, lease_id, lease_ms, progress)
  local key = job_key(id)
  local job = redis.call('HMGET', key, 'state', 'worker', 'lease_ms', 'cancel_requested')
  if not job[1] then return JOB_NOT_FOUND, 0, 0 end
  if not holds_lease(id, lease_id, job[2]) then return LEASE_LOST, 0, 0 end
  if lease_ms == 0 then lease_ms = tonumber(job[3]) end
  if not may_renew_for(job[2], lease_ms) then return WORKER_OWNED, 0, 0 end
  local expires_at = now + lease_ms
  local expires_text = text(expires_at)
  redis.call('PEXPIRE', lock_key(id), text(lease_ms))
  if progress and progress ~= '' then
    redis.call('HSET', key, 'lease_expires_at', expires_text, 'updated_at', now_text, 'progress', progress)
    -- Events stay small (every follower buffers them): a big progress stays on the job only.
    local reported = '"progress_truncated":true'
    if #progress <= MAX_EVENT_PROGRESS_BYTES then reported = '"progress":' .. progress end
    emit('progress', id, '"worker":"' .. job[2] .. '",' .. reported)
  else
    redis.call('HSET', key, 'lease_expires_at', expires_text, 'updated_at', now_text)
  end
  deadlines[#deadlines + 1] = expires_text
  deadlines[#deadlines + 1] = id
  if earliest == nil or expires_at < earliest then earliest = expires_at end
  return 1, expires_at, job[4] and 1 or 0
end

local reply = {}
for _, lease in ipairs(leases) do
  local code, expires_at, cancel_requested = renew(lease[1], lease[2], tonumber(lease[3]), lease[4])
  reply[#reply + 1] = code
  reply[#reply + 1] = expires_at
  reply[#reply + 1] = cancel_requested
end
call_chunked('ZADD', DEADLINES, deadlines)
if earliest ~= nil then sweep_needed_by(earliest) end
return finish(reply, now)
