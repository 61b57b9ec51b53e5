-- Shared by every script; the loader (service/scripts.py) inlines it where a script says
-- "@include common" and fills in the placeholders between at-signs (service/scripts.py).
-- Every script takes the same ten KEYS, in the order of service.keys.QueueKeys.script_keys,
-- and ARGV[1] = the queue's key prefix "emq:{queue}:". Per-job and per-worker keys are derived
-- from that prefix, so they carry the same hash tag and live in the queue's cluster slot.
local META, WAIT, PRIO, DELAYED, ACTIVE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local DEADLINES, WORKERS, COMPLETED, FAILED, WAKE = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local PREFIX = ARGV[1]

local JOB_NOT_FOUND = -1
local LEASE_LOST = -2
local JOB_ACTIVE = -3

-- Waiting jobs with priority > 0 sit in PRIO scored (MAX_PRIORITY - priority) * BAND + offset,
-- so higher priorities come first. Within a band, jobs handed back (release, sweep) get offsets
-- below MIDDLE (leased next) and new or retried jobs offsets above it (FIFO). All scores stay
-- below 2^53, so doubles hold them exactly.
local MAX_PRIORITY = @MAX_PRIORITY@
local PRIORITY_BAND = 8796093022208 -- 2^43
local PRIORITY_MIDDLE = 4398046511104 -- 2^42

-- A job's hash leaves out fields that hold their default (absent: name "", priority 0, attempt 0,
-- these max_attempts and backoff, updated_at = created_at): a queued job costs less memory.
local DEFAULT_MAX_ATTEMPTS = @DEFAULT_MAX_ATTEMPTS@
local DEFAULT_BACKOFF_MS = @DEFAULT_BACKOFF_MS@
local function number_or(value, default) return value and tonumber(value) or default end
local function priority_of(key) return number_or(redis.call('HGET', key, 'priority'), 0) end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function job_key(id) return PREFIX .. id .. '@JOB_SUFFIX@' end
local function lock_key(id) return PREFIX .. id .. '@LOCK_SUFFIX@' end
local function holds_key(worker) return PREFIX .. worker .. '@HOLDS_SUFFIX@' end

-- Make a job leasable. front = true puts it first in line among its priority.
local function push_waiting(id, priority, front)
  if priority == 0 then
    if front then redis.call('RPUSH', WAIT, id) else redis.call('LPUSH', WAIT, id) end
    return
  end
  local score = (MAX_PRIORITY - priority) * PRIORITY_BAND + PRIORITY_MIDDLE
  if front then
    score = score - redis.call('HINCRBY', META, 'front_seq', 1)
  else
    score = score + redis.call('HINCRBY', META, 'back_seq', 1)
  end
  redis.call('ZADD', PRIO, score, id)
end

-- True when lease_id is the job's current, unexpired lease (its lock names it). worker is the
-- job's worker field, when the caller has read it already.
local function holds_lease(id, key, lease_id, worker)
  local lock = redis.call('GET', lock_key(id))
  if lock == false then return false end
  worker = worker or redis.call('HGET', key, 'worker')
  return worker ~= false and lock == lease_id .. ':' .. worker
end

-- Taking jobs out of the in-flight ledger, and out of everything that attributes them to their
-- workers, in two steps: leave_ledger for each job, then detach once for all of them, which
-- batches the set and sorted-set removals into one command per key (issue 5: fewer calls).
-- LREM with count -1 scans from the right, where the oldest leases are: a typical ack is cheap
-- however many jobs are in flight.
local function new_departures() return {ids = {}, by_worker = {}, workers = {}} end

local function leave_ledger(departures, id, key, worker, lock_deleted)
  redis.call('LREM', ACTIVE, -1, id)
  if not lock_deleted then redis.call('DEL', lock_key(id)) end
  redis.call('HDEL', key, 'worker', 'lease_id', 'leased_at', 'lease_expires_at', 'lease_ms')
  departures.ids[#departures.ids + 1] = id
  if worker then
    local held = departures.by_worker[worker]
    if not held then
      held = {}
      departures.by_worker[worker] = held
      departures.workers[#departures.workers + 1] = worker
    end
    held[#held + 1] = id
  end
end

local function detach(departures)
  if #departures.ids == 0 then return end
  redis.call('ZREM', DEADLINES, unpack(departures.ids))
  for _, worker in ipairs(departures.workers) do
    local holds = holds_key(worker)
    redis.call('SREM', holds, unpack(departures.by_worker[worker]))
    if redis.call('SCARD', holds) == 0 then redis.call('SREM', WORKERS, worker) end
  end
end

-- Both steps for one job.
local function leave_ledger_now(id, key)
  local departures = new_departures()
  leave_ledger(departures, id, key, redis.call('HGET', key, 'worker'))
  detach(departures)
end

local function dead_letter(id, key, now)
  redis.call('HSET', key, 'state', 'failed', 'finished_at', now, 'updated_at', now)
  redis.call('ZADD', FAILED, now, id)
end

-- Move due delayed jobs to waiting; returns how many moved.
local function promote_due(now, limit)
  local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(due) do
    local key = job_key(id)
    redis.call('ZREM', DELAYED, id)
    redis.call('HSET', key, 'state', 'waiting', 'updated_at', now)
    push_waiting(id, priority_of(key), false)
  end
  return #due
end

local function wake_waiters(count)
  -- PUBLISH, or SPUBLISH on a Cluster (the channel is KEYS[10], so it shares the queue's slot)
  if count > 0 then redis.call('@PUBLISH@', WAKE, count) end
end
