-- Storing a new job, for the scripts that make jobs (enqueue, a schedule's runs and triggers).
-- @include base
-- @include events
-- @include due_index
-- @include waiting

-- Appends field and value to an HSET's arguments, unless the value is the field's default.
local function unless_default(fields, field, value, default)
  if value ~= default then
    fields[#fields + 1] = field
    fields[#fields + 1] = value
  end
end

-- Stores job `id` unless a job with that id is kept (then it stays as it is). job: the options
-- enqueue.lua's ARGV[2] describes; payload: raw JSON; schedule: the schedule that made it, or
-- nil. A waiting job goes in its line; an ungrouped one of priority 0 is appended to
-- `unprioritised` instead when the caller gives that list (for one LPUSH of them all).
-- flow: a flow's node (create_flow.lua), or nil: {fields = more field/value pairs for the hash,
-- waiting_children = true for a parent, which waits for its children in no line (its delay_ms
-- is for after them)}.
-- Emits enqueued. Returns the job's state and 1 when it was stored now (0: the id was kept).
local function store_job(id, job, payload, now, schedule, unprioritised, flow)
  local key = job_key(id)
  local state = redis.call('HGET', key, 'state')
  if state then return state, 0 end
  state = job.delay_ms > 0 and 'delayed' or 'waiting'
  if flow and flow.waiting_children then state = 'waiting_children' end
  local fields = {'payload', payload, 'state', state, 'created_at', now}
  if flow then
    for _, value in ipairs(flow.fields) do fields[#fields + 1] = value end
  end
  unless_default(fields, 'name', job.name, '')
  unless_default(fields, 'priority', job.priority, 0)
  unless_default(fields, 'max_attempts', job.max_attempts, DEFAULT_MAX_ATTEMPTS)
  unless_default(fields, 'backoff_type', job.backoff_type, 'exponential')
  unless_default(fields, 'backoff_ms', job.backoff_ms, DEFAULT_BACKOFF_MS)
  unless_default(fields, 'traceparent', job.traceparent, nil)
  unless_default(fields, 'group', job.group, nil)
  unless_default(fields, 'schedule', schedule, nil)
  -- A delayed job's due time, its score in DELAYED, is kept in its hash too (written in the same
  -- call, and nothing else moves a due time) so that every read of the job shows it (run_at).
  local run_at = now + job.delay_ms
  if state == 'delayed' then
    fields[#fields + 1] = 'run_at'
    fields[#fields + 1] = text(run_at)
  end
  redis.call('HSET', key, unpack(fields))
  emit('enqueued', id, '"state":"' .. state .. '"' .. (schedule and ',"schedule":"' .. schedule .. '"' or ''))
  if state == 'waiting_children' then return state, 1 end
  if state == 'delayed' then
    redis.call('ZADD', DELAYED, run_at, id)
    note_delayed(run_at)
    sweep_needed_by(run_at)
  elseif unprioritised and job.priority == 0 and not job.group then
    unprioritised[#unprioritised + 1] = id
  else
    push_waiting(id, job.priority, false, job.group)
  end
  return state, 1
end
