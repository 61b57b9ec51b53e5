-- A worker reports a failed attempt. With attempts left (and retry allowed) the job waits out its
-- backoff in DELAYED, or joins the back of the line when the delay is 0; otherwise it is
-- dead-lettered into FAILED. The same call again (same job, same lease id) answers as the first
-- did and changes nothing, so a worker whose answer was lost can retry.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes ACTIVE, DEADLINES, WORKERS,
--             DELAYED or WAIT/PRIO (a grouped job: its group's line) or FAILED, META, DUE, publishes on WAKE
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     job id
-- ARGV[3]     lease id
-- ARGV[4]     JSON {retry: bool, retry_after_ms?: int}; without retry_after_ms the job's backoff
--             applies: fixed = backoff_ms, exponential = backoff_ms * 2^(attempt-1) capped at
--             @MAX_EXPONENTIAL_BACKOFF_MS@ ms (1 h)
-- ARGV[5]     error text
-- A job whose cancellation was requested ends cancelled instead, whatever retry says.
-- Emits retrying, failed (reason "fail") or cancelled; a dead letter counts in the history.
-- Returns     {1, state, attempt} with state "waiting"|"delayed"|"failed"|"cancelled",
--             {-1} job not found, {-2} lease lost
-- @include base
-- @include events
-- @include due_index
-- @include retention
-- @include waiting
-- @include ledger
-- @include flows
local id, lease_id = ARGV[2], ARGV[3]
local key = job_key(id)
local job = redis.call('HMGET', key, 'state', 'worker', 'attempt', 'max_attempts', 'backoff_type',
  'backoff_ms', 'priority', 'done_lease', 'cancel_requested', 'cancel_reason', 'group')
if not job[1] then return {JOB_NOT_FOUND} end
if not holds_lease(id, lease_id, job[2]) then
  local first = ended_as(job[8], lease_id) -- "fail:<state>:<attempt>" after this very call
  local state, attempt = string.match(first or '', '^fail:(%a+):(%d+)$')
  if state then return {1, state, tonumber(attempt)} end
  return {LEASE_LOST}
end
local options = cjson.decode(ARGV[4])
local now = now_ms()
local attempt, max_attempts = number_or(job[3], 0), number_or(job[4], DEFAULT_MAX_ATTEMPTS)
leave_ledger_now(id, key, job[2], job[11])

local function settle(state, error_text)
  redis.call('HSET', key, 'error', error_text or ARGV[5], 'updated_at', now,
    'done_lease', lease_id .. ':fail:' .. state .. ':' .. attempt)
  return finish_and_deliver({1, state, attempt}, now)
end

if job[9] then
  cancel_job(id, key, now, job[10])
  return settle('cancelled', job[10] or 'cancelled')
end
if not options.retry or attempt >= max_attempts then
  dead_letter(id, key, now, attempt, 'fail', ARGV[5])
  return settle('failed')
end
local function retrying(state)
  emit('retrying', id, '"attempt":' .. attempt .. ',"state":"' .. state .. '","error":' .. json_text(ARGV[5]))
  return settle(state)
end
local delay_ms = options.retry_after_ms
if delay_ms == nil then
  local backoff_ms = number_or(job[6], DEFAULT_BACKOFF_MS)
  if job[5] == 'fixed' then
    delay_ms = backoff_ms
  else
    delay_ms = math.min(backoff_ms * 2 ^ (attempt - 1), @MAX_EXPONENTIAL_BACKOFF_MS@)
  end
end
if delay_ms > 0 then
  local run_at = now + delay_ms
  redis.call('HSET', key, 'state', 'delayed', 'run_at', text(run_at)) -- as include/store.lua keeps it
  redis.call('ZADD', DELAYED, run_at, id)
  note_delayed(run_at)
  sweep_needed_by(run_at)
  return retrying('delayed')
end
redis.call('HSET', key, 'state', 'waiting')
push_waiting(id, number_or(job[7], 0), false, job[11])
wake_waiters(1)
return retrying('waiting')
