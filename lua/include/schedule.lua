-- A queue's schedules, for the scripts that write them (put, fire, trigger, delete) and the
-- readers (due, listing). A schedule is a HASH "<schedule>:sched" (service/echomq_http/store/keys.py): spec (the
-- request's fields but the job's payload, JSON), job (the options of the job each run makes, as
-- include/store.lua reads them), payload (raw JSON), clock (what service/echomq_http/core/schedules.py computes
-- run times from), timing (the fields that, changed, move the next run), overlap ("skip" or
-- absent), run_limit and paused (absent: none), next_run_at, last_run_at, last_job_id, runs,
-- skipped, created_at, updated_at, and version (+1 by every write that moves a run, so a PUT can
-- compare-and-set against what it read). SCHEDULES lists every schedule by name; TIMETABLE
-- holds the ones with a next run, scored by its time.
-- @include base
-- @include due_index
local SCHEDULES = PREFIX .. '@SCHEDULES_NAME@'
local TIMETABLE = PREFIX .. '@TIMETABLE_NAME@'
local function schedule_key(name) return PREFIX .. name .. '@SCHEDULE_SUFFIX@' end

-- The schedule's next run ("" or nil: none): in its hash, in TIMETABLE, and in the due index
-- (the sweep that finds it due fires it).
local function set_next_run(name, key, next_run)
  if next_run and next_run ~= '' then
    redis.call('HSET', key, 'next_run_at', next_run)
    redis.call('ZADD', TIMETABLE, next_run, name)
    sweep_needed_by(tonumber(next_run))
  else
    redis.call('HDEL', key, 'next_run_at')
    redis.call('ZREM', TIMETABLE, name)
  end
end
