-- Leasing waiting jobs, for the scripts that do it (lease, ack-lease).

local JOB_FIELDS = {'name', 'payload', 'max_attempts', 'created_at', 'traceparent', 'attempt'}

local function append_job(reply, id, job, attempt, lease_id, expires_at, fence)
  reply[#reply + 1] = id
  reply[#reply + 1] = job[1]
  reply[#reply + 1] = job[2]
  reply[#reply + 1] = attempt
  reply[#reply + 1] = number_or(job[3], DEFAULT_MAX_ATTEMPTS)
  reply[#reply + 1] = lease_id
  reply[#reply + 1] = expires_at
  reply[#reply + 1] = fence
  reply[#reply + 1] = tonumber(job[4])
  reply[#reply + 1] = job[5]
end

-- The ids to try, in order: the highest priorities first, then the oldest (right) end of WAIT.
-- Taken from their keys in a few commands for the whole batch rather than a few per job.
local TOMBSTONES_PER_CALL = 4096 -- dropped at most per call (a bound on one lease's work)
local function take_waiting(wanted)
  local ids = {}
  if redis.call('EXISTS', PRIO) == 1 then
    local top = redis.call('ZPOPMIN', PRIO, wanted)
    for i = 1, #top, 2 do ids[#ids + 1] = top[i] end
  end
  wanted = wanted - #ids
  if wanted > 0 then
    -- RPOP with a count (Redis >= 6.2): the oldest first, nil when WAIT is empty. Tombstones
    -- (the places of deleted or cancelled jobs: common.lua bury_waiting) are dropped, and as
    -- many more entries popped in their stead, up to TOMBSTONES_PER_CALL of them.
    local buried = 0
    while wanted > 0 do
      local oldest = redis.call('RPOP', WAIT, wanted)
      if not oldest then break end
      local found = 0
      for i = 1, #oldest do
        if string.sub(oldest[i], 1, 1) == WAIT_TOMBSTONE then
          found = found + 1
        else
          ids[#ids + 1] = oldest[i]
          wanted = wanted - 1
        end
      end
      buried = buried + found
      if found == 0 or buried >= TOMBSTONES_PER_CALL then break end
    end
    if buried > 0 then redis.call('HINCRBY', META, 'wait_tombstones', -buried) end
  end
  return ids
end

-- Lease up to max_jobs waiting jobs to worker (see lease-11.lua). lease_ms_text: the lease's
-- length in ms, as text; lease_ids: max_jobs random tokens of @LEASE_ID_CHARS@ characters,
-- concatenated; request_id: the call's id, its record kept record_ms. Returns the lease script's
-- reply: {stale, then 10 entries per leased job}. now: the time (ms).
local function lease_jobs(worker, lease_ms_text, max_jobs, lease_ids, request_id, record_ms, now)
  local lease_ms = tonumber(lease_ms_text)
  local request = request_key(worker, request_id)
  local earlier = redis.call('GET', request)
  if earlier then
    local reply = {0}
    for id, lease_id in string.gmatch(earlier, '(%S+) (%S+)') do
      if holds_lease(id, lease_id, worker) then
        local key = job_key(id)
        local job = redis.call('HMGET', key, unpack(JOB_FIELDS))
        local lease = redis.call('HMGET', key, 'lease_expires_at', 'fence')
        append_job(reply, id, job, number_or(job[6], 0), lease_id, tonumber(lease[1]), tonumber(lease[2]))
      end
    end
    return reply
  end
  -- The worker's session: a quiet one leases nothing; a lapsed one the sweep has not yet taken
  -- is bound here, before this lease, so that its lapse leaves this lease alone (sweep-11.lua).
  local session = redis.call('HMGET', session_key(worker), 'state', 'expires_at', 'lapsed_fence')
  if session[2] then
    if tonumber(session[2]) > now then
      if session[1] == 'quiet' then return {0} end
    elseif not session[3] then
      redis.call('HSET', session_key(worker), 'lapsed_fence', redis.call('HGET', META, 'fence') or '0')
    end
  end
  local meta = redis.call('HMGET', META, 'paused', 'fence')
  if meta[1] then return {0} end
  promote_due(now, max_jobs)

  local expires_at = now + lease_ms
  local now_text, expires_text = text(now), text(expires_at)
  local fence = number_or(meta[2], 0)
  local leased, deadlines, held, record = {}, {}, {}, {}
  local reply = {0}
  -- A dropped entry leaves room for another job: a few more rounds, never an unbounded loop.
  for _ = 1, 4 do
    local ids = take_waiting(max_jobs - #leased)
    if #ids == 0 then break end
    for _, id in ipairs(ids) do
      local key = job_key(id)
      local job = redis.call('HMGET', key, 'name', 'payload', 'max_attempts', 'created_at', 'traceparent',
        'attempt', 'redeliver', 'state')
      if job[8] ~= 'waiting' then
        stale_entries = stale_entries + 1
      else
        local i = #leased + 1
        local lease_id = string.sub(lease_ids, (i - 1) * @LEASE_ID_CHARS@ + 1, i * @LEASE_ID_CHARS@)
        fence = fence + 1
        local attempt = number_or(job[6], 0)
        if job[7] then
          redis.call('HDEL', key, 'redeliver') -- a released delivery is not counted
        else
          attempt = attempt + 1
        end
        local fence_text = text(fence)
        redis.call('HSET', key, 'state', 'active', 'attempt', text(attempt), 'worker', worker,
          'lease_id', lease_id, 'lease_ms', lease_ms_text, 'leased_at', now_text, 'lease_expires_at', expires_text,
          'fence', fence_text, 'updated_at', now_text)
        redis.call('SET', lock_key(id), lease_id .. ':' .. worker, 'PX', lease_ms_text)
        leased[i] = id
        deadlines[2 * i - 1], deadlines[2 * i] = expires_text, id
        held[2 * i - 1], held[2 * i] = fence_text, id
        record[i] = id .. ' ' .. lease_id
        append_job(reply, id, job, attempt, lease_id, expires_at, fence)
        emit('leased', id, '"worker":"' .. worker .. '","attempt":' .. attempt .. ',"fence":' .. fence_text ..
          ',"lease_expires_at":' .. expires_text)
      end
    end
    if #leased == max_jobs then break end
  end
  reply[1] = stale_entries
  if #leased == 0 then return reply end

  -- Newest lease on the left, in leasing order, as one LMOVE per job would have left them.
  redis.call('LPUSH', ACTIVE, unpack(leased))
  redis.call('ZADD', DEADLINES, unpack(deadlines))
  sweep_needed_by(expires_at)
  redis.call('ZADD', held_key(worker), unpack(held))
  redis.call('HSET', META, 'fence', text(fence))
  redis.call('SADD', WORKERS, worker)
  redis.call('SET', request, table.concat(record, ' '), 'PX', record_ms)
  return reply
end
