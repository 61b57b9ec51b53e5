-- Delete a whole queue, one bounded step at a time: each step deletes up to `step` jobs with
-- their keys (jobs in flight first, with their locks, then waiting ones, group by group (a
-- group's waiting jobs, then its own keys), delayed, completed and failed ones, schedules), then the
-- workers' held sets, sessions and owner records; the step that finds nothing left deletes the
-- queue's own keys and its entry in the due index. Without force, the first step refuses a
-- queue with jobs in its ledger; once begun, the deletion takes whatever it finds (a job leased
-- meanwhile is gone for its worker, whose later calls answer "job not found").
-- KEYS[1..11] the queue's keys (see include/base.lua); deletes every one of them but WAKE, the
--             per-job, per-worker and per-group keys derived from the prefix, and the queue's
--             cancelled jobs, sessions, events, history, rate limit log (its settings are META
--             fields), group ring, group index and parked groups, schedules and timetable
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     "1" = force (jobs in flight are deleted too), "0" = refuse while any are
-- ARGV[3]     "1" on the first step
-- ARGV[4]     step: at most this many jobs (and this many workers' held sets, and sessions)
-- A job of a flow that had not finished is told to its parent as deleted (include/flows.lua);
-- the queue's outbox outlives the deletion until the sweep has delivered it.
-- Returns     1 the queue is gone, 0 more steps to go, -3 jobs in flight (first step, no force)
-- @include base
-- @include workers
-- @include history
-- @include events
-- @include retention
-- @include groups
-- @include schedule
-- @include flows
local force, first, budget = ARGV[2] == '1', ARGV[3] == '1', tonumber(ARGV[4])
if first and not force and redis.call('LLEN', ACTIVE) > 0 then return JOB_ACTIVE end

-- A job of a flow that had not finished counts as deleted for its parent (include/children.lua);
-- a parent's children's outcomes go with it. on_flows: the queue has had flows' children (META).
local on_flows = redis.call('HGET', META, 'flows')
local function delete_jobs(ids, with_locks, unfinished)
  for _, id in ipairs(ids) do
    if unfinished and on_flows then
      local key = job_key(id)
      local link = redis.call('HMGET', key, 'parent', 'on_failure')
      if link[1] then child_finished(key, id, link[1], link[2], 'd', 'deleted') end
    end
    redis.call('DEL', job_keys(id))
    if with_locks then redis.call('DEL', lock_key(id)) end
  end
  budget = budget - #ids
end

-- The oldest `budget` entries of a list, taken out of it.
local function take_from_list(key)
  if budget <= 0 then return {} end
  local ids = redis.call('LRANGE', key, -budget, -1)
  if #ids > 0 then redis.call('LTRIM', key, 0, -(#ids + 1)) end
  return ids
end

-- The first `budget` members of a sorted set, taken out of it.
local function take_from_zset(key)
  if budget <= 0 then return {} end
  local ids = redis.call('ZRANGE', key, 0, budget - 1)
  if #ids > 0 then redis.call('ZREMRANGEBYRANK', key, 0, #ids - 1) end
  return ids
end

local in_flight = take_from_list(ACTIVE)
call_chunked('ZREM', DEADLINES, in_flight)
delete_jobs(in_flight, true, true)
delete_jobs(take_from_zset(PRIO), false, true)
delete_jobs(take_from_list(WAIT), false, true)
delete_jobs(take_from_zset(waiting_children_key()), false, true)
-- Groups, one after another by name: its waiting jobs, then (once none are left) its hash.
local g = groups()
while budget > 0 do
  local group = redis.call('ZRANGE', g.GROUPS, 0, 0)[1]
  if not group then break end
  delete_jobs(take_from_zset(g.wait_key(group)), false, true)
  if redis.call('EXISTS', g.wait_key(group)) == 1 then break end
  redis.call('DEL', g.key(group))
  redis.call('ZREM', g.GROUPS, group)
  budget = budget - 1
end
delete_jobs(take_from_zset(DELAYED), false, true)
for _, finished in ipairs({COMPLETED, FAILED, CANCELLED}) do delete_jobs(take_from_zset(finished), false) end
-- Schedules: their hashes by the index of names (the jobs they made are deleted above).
local schedule_names = take_from_zset(SCHEDULES)
for _, name in ipairs(schedule_names) do redis.call('DEL', schedule_key(name)) end
budget = budget - #schedule_names
if budget > 0 then
  -- A worker's name is freed with its held set or session (an owner record of a worker with
  -- neither lapses by its TTL).
  for _, worker in ipairs(redis.call('SPOP', WORKERS, budget)) do
    redis.call('DEL', held_key(worker), owner_key(worker))
  end
  for _, worker in ipairs(take_from_zset(SESSIONS)) do
    redis.call('DEL', session_key(worker), owner_key(worker))
  end
end
for _, key in ipairs({ACTIVE, PRIO, WAIT, g.GROUPS, DELAYED, COMPLETED, FAILED, CANCELLED, SCHEDULES, WORKERS, SESSIONS,
  waiting_children_key()}) do
  if redis.call('EXISTS', key) == 1 then return finish_and_deliver(0, now_ms()) end
end
-- Nothing left but the queue's own small keys. DEADLINES can only hold entries of jobs that
-- were in the ledger, all deleted above. The outbox stays until the sweep has delivered it
-- (then it is empty, so gone): its parents live elsewhere and must hear of their children.
redis.call('UNLINK', META, DEADLINES, EVENTS, HISTORY, PREFIX .. '@RATE_NAME@', g.RING, g.PARKED, TIMETABLE,
  parents_key())
finish_and_deliver(nil, now_ms())
if redis.call('EXISTS', outbox_key()) == 1 then
  redis.call('ZADD', DUE, now_ms(), QUEUE)
else
  redis.call('ZREM', DUE, QUEUE)
end
return 1
