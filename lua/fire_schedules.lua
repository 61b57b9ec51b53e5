-- Fire due schedules: for each, a compare-and-set on the run time the service read as its next
-- run (due_schedules.lua) and computed the following one from (service/echomq_http/core/schedules.py). A
-- schedule whose next run is no longer that time (fired by another process, a re-sent call,
-- replaced, paused, deleted) is left alone; else its run makes one job, with an id derived from
-- the schedule and the run time (so not even a re-sent call of a lost reply makes a second), or
-- is skipped (overlap "skip" while the schedule's last job is waiting, delayed or active: counted
-- in "skipped"), and the schedule moves on to the next run (none past its run_limit).
-- KEYS[1..11] the queue's keys (see include/base.lua); writes the schedules' hashes, TIMETABLE,
--             the jobs made (their hashes, WAIT or a group's line) and DUE; publishes on WAKE
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     n: how many schedules follow (at most the service's fire batch)
-- ARGV[3..]   n groups of four: schedule name, its run time read (ms), the run after it ("":
--             none), the run's job id
-- Returns     one entry per schedule: 1 fired (a job made, or found made by an earlier call of
--             the same run), 2 skipped (overlap), 0 left alone
--             Emits enqueued (with the schedule's name) per job made; counts them in the history.
-- @include base
-- @include history
-- @include events
-- @include store
-- @include schedule
local RUNNING = {waiting = true, delayed = true, active = true}
local now = now_ms()
local reply, made = {}, 0
for i = 3, 2 + 4 * tonumber(ARGV[2]), 4 do
  local name, run_at, next_run, job_id = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local key = schedule_key(name)
  local s = redis.call('HMGET', key, 'next_run_at', 'overlap', 'last_job_id', 'job', 'payload', 'run_limit', 'paused')
  local outcome = 0
  if s[1] == run_at and not s[7] then
    if s[2] == 'skip' and s[3] and RUNNING[redis.call('HGET', job_key(s[3]), 'state')] then
      outcome = 2
      redis.call('HINCRBY', key, 'skipped', 1)
      redis.call('HSET', key, 'last_skipped_at', run_at)
    else
      outcome = 1
      local _, created = store_job(job_id, cjson.decode(s[4]), s[5], now, name)
      made = made + created
      local runs = redis.call('HINCRBY', key, 'runs', 1)
      redis.call('HSET', key, 'last_run_at', run_at, 'last_job_id', job_id)
      if s[6] and runs >= tonumber(s[6]) then next_run = '' end
    end
    redis.call('HINCRBY', key, 'version', 1)
    set_next_run(name, key, next_run)
  end
  reply[#reply + 1] = outcome
end
wake_waiters(made)
count_history('enqueued', made)
return finish(reply, now)
