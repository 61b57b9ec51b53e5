-- The waiting jobs' lines (WAIT, PRIO, a group's line): putting a job in line, taking it out,
-- counting them, and delayed jobs joining them once due.
-- @include base
-- @include groups

-- Waiting jobs with priority > 0 sit in PRIO scored (MAX_PRIORITY - priority) * BAND + offset,
-- so higher priorities come first. Within a band, jobs handed back (release, sweep) get offsets
-- below MIDDLE (leased next) and new or retried jobs offsets above it (FIFO). All scores stay
-- below 2^53, so doubles hold them exactly.
local MAX_PRIORITY = @MAX_PRIORITY@
local PRIORITY_BAND = 8796093022208 -- 2^43
local PRIORITY_MIDDLE = 4398046511104 -- 2^42

-- The queue's waiting jobs: WAIT less its tombstones, PRIO, and the grouped ones (META
-- "group_waiting", counted by the groups' helpers below).
local function waiting_count()
  local meta = redis.call('HMGET', META, 'wait_tombstones', 'group_waiting')
  return redis.call('LLEN', WAIT) - number_or(meta[1], 0) + redis.call('ZCARD', PRIO) + number_or(meta[2], 0)
end

-- A waiting job's score in PRIO or in its group's line: its priority's band, then before the
-- middle when handed back (front), after it when new or retried.
local function line_score(priority, front)
  local score = (MAX_PRIORITY - priority) * PRIORITY_BAND + PRIORITY_MIDDLE
  if front then return score - redis.call('HINCRBY', META, 'front_seq', 1) end
  return score + redis.call('HINCRBY', META, 'back_seq', 1)
end

-- Make a job leasable. front = true puts it first in line among its priority (in its group's
-- line when it has one: group, else false or nil).
local function push_waiting(id, priority, front, group)
  if group then
    groups().push(id, line_score(priority, front), group)
  elseif priority == 0 then
    if front then
      redis.call('RPUSH', WAIT, id)
      -- Counted, so that a listing cursor knows how far its anchor can have moved from the
      -- right end since its page (lua/list_jobs.lua).
      redis.call('HINCRBY', META, 'front_pushes', 1)
    else
      redis.call('LPUSH', WAIT, id)
    end
  else
    redis.call('ZADD', PRIO, line_score(priority, front), id)
  end
end

-- A waiting job taken out of line (deleted, cancelled) leaves a tombstone ":<id>" in its place
-- in WAIT rather than an LREM: entries then leave WAIT only from its right end (leases), so the
-- job listing's cursor always finds its anchor where it was (lua/list_jobs.lua). META
-- "wait_tombstones" counts them (counts subtract it); a lease drops those it pops.
local WAIT_TOMBSTONE = ':' -- ids never contain ':'
local function bury_waiting(id)
  local at = redis.call('LPOS', WAIT, id)
  if not at then return end
  redis.call('LSET', WAIT, at, WAIT_TOMBSTONE .. id)
  redis.call('HINCRBY', META, 'wait_tombstones', 1)
end

-- A delayed job, out of DELAYED, joins the back of its priority's line (its group's line when it
-- has one). job: its hash's {state, priority, group}. Its "run_at" field is left as it is: the
-- job view shows it only while the job is delayed, and the next delay writes it anew.
local function delayed_to_waiting(id, key, job, now)
  redis.call('HSET', key, 'state', 'waiting', 'updated_at', now)
  push_waiting(id, number_or(job[2], 0), false, job[3])
end

-- Move due delayed jobs to waiting; returns how many moved and how many due entries were read.
local function promote_due(now, limit)
  local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', now, 'LIMIT', 0, limit)
  if #due == 0 then return 0, 0 end
  call_chunked('ZREM', DELAYED, due)
  local promoted = 0
  for _, id in ipairs(due) do
    local key = job_key(id)
    local job = redis.call('HMGET', key, 'state', 'priority', 'group')
    if job[1] == 'delayed' then
      delayed_to_waiting(id, key, job, now)
      promoted = promoted + 1
    else
      stale_entries = stale_entries + 1
    end
  end
  return promoted, #due
end

