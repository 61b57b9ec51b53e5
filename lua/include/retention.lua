-- Finished jobs: completed, dead-lettered or cancelled, kept for a time and up to a count.
-- @include base
-- @include due_index
-- @include history
-- @include events
-- @include children

-- The service's retention of finished jobs: for a time, and up to a count per queue.
local COMPLETED_RETENTION_MS = @COMPLETED_RETENTION_MS@
local FAILED_RETENTION_MS = @FAILED_RETENTION_MS@
local COMPLETED_MAX = @COMPLETED_MAX@
local FAILED_MAX = @FAILED_MAX@
-- A queue's settings may set its own retention times (META "completed_retention_s",
-- "failed_retention_s", in seconds): they take the place of the service's. The count caps stay
-- the service's.
local function retention_ms(field, service_ms)
  local seconds = redis.call('HGET', META, field)
  return seconds and tonumber(seconds) * 1000 or service_ms
end

-- Finished jobs are kept for a time (the sweep deletes them once it is over) and up to a count
-- per queue: past the count the oldest go at once, at most `allowance` of them per call, so a
-- call stays short even right after the count was lowered (the sweep catches up the rest).
-- A trim takes a little more than the excess (a 64th of the count, at most TRIM_SLACK_MAX), so
-- that a queue at its count trims once per few dozen finished jobs, in one DEL, rather than
-- three more commands for every job.
local TRIM_ALLOWANCE = 100
local TRIM_SLACK_MAX = 63
local function keep_at_most(finished, max, allowance, size)
  size = size or redis.call('ZCARD', finished)
  if size <= max then return 0 end
  local excess = math.min(size - max + math.min(math.floor(max / 64), TRIM_SLACK_MAX), allowance)
  local oldest = redis.call('ZRANGE', finished, 0, excess - 1)
  local keys = {}
  for i, id in ipairs(oldest) do keys[i] = job_key(id) end
  add_parents_keys(keys, oldest)
  call_chunked('DEL', nil, keys) -- one DEL for many: a call each costs more than the deletion
  redis.call('ZREMRANGEBYRANK', finished, 0, excess - 1)
  return #oldest
end

-- Completed jobs: `entries` are ZADD arguments (finish time, id, ...).
local function record_completed(entries, now)
  if #entries == 0 then return end
  call_chunked('ZADD', COMPLETED, entries)
  local added, size = #entries / 2, redis.call('ZCARD', COMPLETED)
  -- Only the first completed job brings the queue's retention work forward: an older one's
  -- retention ends sooner, and the due index is no later than that already.
  if size == added then sweep_needed_by(now + retention_ms('completed_retention_s', COMPLETED_RETENTION_MS)) end
  keep_at_most(COMPLETED, COMPLETED_MAX, added + TRIM_ALLOWANCE, size)
end

-- reason: "fail" (the worker's last attempt failed), "lease_expired" (its lease ran out or its
-- worker's session lapsed, on its last attempt), "stalled" (past the queue's max_stalls).
local function dead_letter(id, key, now, attempt, reason, error_text)
  redis.call('HSET', key, 'state', 'failed', 'finished_at', now, 'updated_at', now)
  redis.call('ZADD', FAILED, now, id)
  sweep_needed_by(now + retention_ms('failed_retention_s', FAILED_RETENTION_MS))
  keep_at_most(FAILED, FAILED_MAX, 1 + TRIM_ALLOWANCE)
  emit('failed', id, '"attempt":' .. attempt .. ',"reason":"' .. reason .. '","error":' .. json_text(error_text))
  count_history('failed', 1)
  local link = redis.call('HMGET', key, 'parent', 'on_failure')
  if link[1] then child_finished(key, id, link[1], link[2], 'f', error_text or '') end
end

-- A job out of the ledger (or out of waiting or delayed) ends cancelled: kept like a dead letter
-- (CANCELLED, with the failed jobs' retention and cap), its error the cancellation's reason.
local CANCELLED = PREFIX .. '@CANCELLED_NAME@'
local function cancel_job(id, key, now, reason)
  redis.call('HSET', key, 'state', 'cancelled', 'cancel_requested', 1, 'finished_at', now, 'updated_at', now,
    'error', reason or 'cancelled')
  redis.call('ZADD', CANCELLED, now, id)
  sweep_needed_by(now + retention_ms('failed_retention_s', FAILED_RETENTION_MS))
  keep_at_most(CANCELLED, FAILED_MAX, 1 + TRIM_ALLOWANCE)
  emit('cancelled', id, '')
  local link = redis.call('HMGET', key, 'parent', 'on_failure')
  if link[1] then child_finished(key, id, link[1], link[2], 'x', reason or 'cancelled') end
end
