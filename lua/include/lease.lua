-- Leasing waiting jobs, for the scripts that do it (lease, ack-lease).
-- @include base
-- @include workers
-- @include events
-- @include due_index
-- @include groups
-- @include waiting
-- @include ledger

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

-- The ungrouped ids to try, in order: the highest priorities first, then the oldest (right) end
-- of WAIT. Taken from their keys in a few commands for the whole batch rather than a few per job.
local TOMBSTONES_PER_CALL = 4096 -- dropped at most per call (a bound on one lease's work)
local tombstones_dropped = 0
local function take_ungrouped(wanted)
  local ids = {}
  if redis.call('EXISTS', PRIO) == 1 then
    local top = redis.call('ZPOPMIN', PRIO, wanted)
    for i = 1, #top, 2 do ids[#ids + 1] = top[i] end
  end
  wanted = wanted - #ids
  if wanted > 0 then
    -- RPOP with a count (Redis >= 6.2): the oldest first, nil when WAIT is empty. Tombstones
    -- (the places of deleted or cancelled jobs: include/waiting.lua bury_waiting) are dropped, and as
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
      if found == 0 or tombstones_dropped + buried >= TOMBSTONES_PER_CALL then break end
    end
    if buried > 0 then
      tombstones_dropped = tombstones_dropped + buried
      redis.call('HINCRBY', META, 'wait_tombstones', -buried)
    end
  end
  return ids
end

-- Flow control: the queue's settings (META "max_in_flight", "rate_max", "rate_per_ms"; absent =
-- no limit) cap how many jobs a lease call may take.
-- max_in_flight: room = the cap - the ledger's length (LLEN, O(1)). A call it held back sets
-- META "room_wanted", and the next job to leave the ledger (include/ledger.lua detach) clears the flag
-- and wakes the queue's long polls: exits cost an uncapped queue one HDEL.
-- rate_limit: no interval of rate_per_ms ms ever leases more than rate_max jobs (a sliding
-- window, counting jobs, not calls; a burst of rate_max at once is allowed). RATE is a log of
-- "<time ms> <jobs>" entries, newest on the left, and META "rate_used" the sum of its jobs. A
-- call that leases appends one entry stamped with the end of its time's grain (per_ms / 1000 ms,
-- at least 1): an entry is counted at least until per_ms after each of its leases (never too
-- short: exact), at most a grain longer (throughput at most 0.1% under the limit), and the log
-- holds at most about 1000 entries in a window whatever rate_max is (calls in one grain share
-- an entry). Each call drops the entries that left the window from the old end, at most
-- RATE_TRIM_PER_CALL of them (one LRANGE, one LTRIM); while that is behind, the old entries
-- still count, so the call leases less, never more. A log whose newest entry left the window is
-- dropped whole (it is that short). The room comes back when the oldest entry still counted
-- leaves the window: retry_after_ms.
local RATE = PREFIX .. '@RATE_NAME@'
local RATE_TRIM_PER_CALL = 64
local RATE_GRAINS_PER_WINDOW = 1000
local TRIM_BEHIND_RETRY_MS = 1 -- the log's trim is behind: room may be there already

local function rate_entry(entry)
  local at, jobs = string.match(entry, '^(%d+) (%d+)$')
  return tonumber(at), tonumber(jobs)
end

-- How many of rate_max jobs the window has room for now.
local function rate_room(rate_max, per_ms, now)
  local newest = redis.call('LINDEX', RATE, 0)
  if not newest then return rate_max end
  if now - rate_entry(newest) >= per_ms then
    redis.call('DEL', RATE)
    redis.call('HDEL', META, 'rate_used')
    return rate_max
  end
  local used = tonumber(redis.call('HGET', META, 'rate_used') or '0')
  local tail = redis.call('LRANGE', RATE, -RATE_TRIM_PER_CALL, -1)
  local out, freed = 0, 0
  for i = #tail, 1, -1 do
    local at, jobs = rate_entry(tail[i])
    if now - at < per_ms then break end
    out, freed = out + 1, freed + jobs
  end
  if out > 0 then
    redis.call('LTRIM', RATE, 0, -(out + 1))
    used = used - freed
    redis.call('HSET', META, 'rate_used', text(used))
  end
  return math.max(rate_max - used, 0)
end

-- When the window has room again (ms from now): when its oldest entry still counted leaves it.
local function rate_retry_after(per_ms, now)
  local oldest = redis.call('LINDEX', RATE, -1)
  if not oldest then return TRIM_BEHIND_RETRY_MS end
  return math.max(rate_entry(oldest) + per_ms - now, TRIM_BEHIND_RETRY_MS)
end

local function record_rate_use(jobs, per_ms, now)
  local grain = math.max(1, math.floor(per_ms / RATE_GRAINS_PER_WINDOW))
  local at = now - now % grain + grain - 1
  local newest = redis.call('LINDEX', RATE, 0)
  local newest_at, newest_jobs
  if newest then newest_at, newest_jobs = rate_entry(newest) end
  if newest_at == at then
    redis.call('LSET', RATE, 0, text(at) .. ' ' .. text(newest_jobs + jobs))
  else
    redis.call('LPUSH', RATE, text(at) .. ' ' .. text(jobs))
  end
  redis.call('HINCRBY', META, 'rate_used', jobs)
end

-- The room the queue's caps leave a call that asks for max_jobs: {room, room left by
-- max_in_flight (nil: no cap), room left by the rate (nil: no rate limit), the rate's window}.
-- caps: META's {max_in_flight, rate_max, rate_per_ms} (read with the lease's other META fields).
local function flow_room(max_jobs, caps, now)
  local room, in_flight_room, rate_left, per_ms = max_jobs, nil, nil, nil
  if caps[1] then
    in_flight_room = math.max(tonumber(caps[1]) - redis.call('LLEN', ACTIVE), 0)
    room = math.min(room, in_flight_room)
  end
  if caps[2] and caps[3] then
    per_ms = tonumber(caps[3])
    rate_left = rate_room(tonumber(caps[2]), per_ms, now)
    room = math.min(room, rate_left)
  end
  return {room, in_flight_room, rate_left, per_ms}
end

-- After the leasing loop: the jobs leased count against the rate. A cap that held the call back
-- (it leased all the room it had, less than it asked for) asks to be woken (max_in_flight) or
-- says when to come back (the rate: reply[2], retry_after_ms); otherwise reply[2] stays 0.
local function flow_after(flow, leased, max_jobs, reply, now, meta)
  if leased > 0 and flow[4] then record_rate_use(leased, flow[4], now) end
  if leased ~= flow[1] or leased >= max_jobs then return end
  if flow[2] == leased then
    redis.call('HSET', META, 'room_wanted', '1')
    meta.room_wanted = '1'
  end
  if flow[3] == leased then reply[2] = rate_retry_after(flow[4], now) end
end

-- Leasing from a grouped queue, made on first use like include/groups.lua's groups().
local function ring_helpers()
  local g, r = groups(), {}

  -- One turn of a group (a member of RING, popped): its first waiting job, counted in the
  -- group's active jobs, appended to ids; then the group goes back to RING's left end if it still
  -- has waiting jobs and room, else it leaves RING (parked when jobs of it wait; forgotten when
  -- idle). An entry whose job is not waiting is dropped (stale). Returns 1 when it took an entry
  -- from the group's line (a job or a stale entry), else 0.
  function r.turn(group, ids)
    local key, line = g.key(group), g.wait_key(group)
    local fields = g.fields(group)
    if not fields[3] then -- a RING entry of a group that is not in it: dropped
      stale_entries = stale_entries + 1
      return 0
    end
    local active, cap = number_or(fields[1], 0), g.cap(fields[2])
    local taken = 0
    if active < cap then
      local top = redis.call('ZPOPMIN', line)
      if top[1] then
        redis.call('HINCRBY', META, 'group_waiting', -1)
        if redis.call('HGET', job_key(top[1]), 'state') == 'waiting' then
          ids[#ids + 1] = top[1]
          active = active + 1
          redis.call('HSET', key, 'active', active)
        else
          stale_entries = stale_entries + 1
        end
        taken = 1
      end
    end
    local waiting = redis.call('ZCARD', line)
    if waiting > 0 and active < cap then
      redis.call('LPUSH', g.RING, group)
    else
      redis.call('HDEL', key, 'ring')
      if waiting > 0 then redis.call('ZADD', g.PARKED, 0, group) end
      g.forget_if_idle(group, {active, fields[2], false}, waiting)
    end
    return taken
  end

  -- The queue's group_max_in_flight changed since the groups in PARKED were last looked at
  -- (META "parked_cap" holds the value of the last complete pass): one step of a pass over
  -- PARKED by name (META "unpark_after": where the step before stopped), putting back into RING
  -- each group that has room under the new cap. At most UNPARK_STEP groups per call; the pass is
  -- complete (parked_cap set) when a step reaches the end.
  local UNPARK_STEP = 256
  function r.unpark(cap_text)
    local after = redis.call('HGET', META, 'unpark_after') or ''
    local names = redis.call('ZRANGEBYLEX', g.PARKED, after == '' and '-' or '(' .. after, '+', 'LIMIT', 0,
      UNPARK_STEP)
    for _, group in ipairs(names) do
      local fields = g.fields(group)
      local waiting = redis.call('ZCARD', g.wait_key(group))
      if fields[3] or waiting == 0 or g.ring(group, fields, waiting) == 1 then
        redis.call('ZREM', g.PARKED, group) -- in RING now, or nothing waiting: not parked
      end
    end
    if #names < UNPARK_STEP then
      redis.call('HSET', META, 'parked_cap', cap_text)
      redis.call('HDEL', META, 'unpark_after')
    else
      redis.call('HSET', META, 'unpark_after', names[#names])
    end
  end

  -- The ids to try: RING's members take turns, one job per turn, so successive jobs come from
  -- successive members (UNGROUPED: the jobs without a group). Each turn is O(1), and groups
  -- without room are not in RING: the cost does not grow with the number of groups. Stops once a
  -- whole round of RING took nothing from any line (UNGROUPED met twice, nothing taken in
  -- between), and after at most 2 * wanted + RING_TURNS_SLACK turns.
  local RING_TURNS_SLACK = 64
  function r.take(wanted)
    local ids = {}
    local ungrouped_empty, taken_since = false, 0
    for _ = 1, 2 * wanted + RING_TURNS_SLACK do
      if #ids >= wanted then break end
      local member = redis.call('RPOP', g.RING)
      if not member then break end
      if member == g.UNGROUPED then
        redis.call('LPUSH', g.RING, g.UNGROUPED)
        local one = ungrouped_empty and {} or take_ungrouped(1)
        if one[1] then
          ids[#ids + 1] = one[1]
        elseif ungrouped_empty and taken_since == 0 then
          break
        else
          ungrouped_empty, taken_since = true, 0
        end
      else
        taken_since = taken_since + r.turn(member, ids)
      end
    end
    return ids
  end
  return r
end

local ring_helpers_made = nil
local function ring()
  if not ring_helpers_made then ring_helpers_made = ring_helpers() end
  return ring_helpers_made
end

-- The ids to try next: from RING on a grouped queue, else from PRIO and WAIT.
local function take_waiting(wanted, grouped)
  if grouped then return ring().take(wanted) end
  return take_ungrouped(wanted)
end

-- META's fields a lease reads, and an ack's departures (room_wanted), in one read: the scripts
-- that ack and lease in one call read them once (read_queue_meta) and hand the table to both,
-- which keep it current with what they write (the fence of each lease, room_wanted), so that
-- several leases of one call (lease_merged.lua) share it too.
local function read_queue_meta()
  local m = redis.call('HMGET', META, 'paused', 'fence', 'grouped', 'group_max_in_flight', 'parked_cap',
    'max_in_flight', 'rate_max', 'rate_per_ms', 'events_off', 'event_seq', 'room_wanted', 'delayed_due', 'flows')
  note_events_meta(m[9], m[10])
  return {paused = m[1], fence = number_or(m[2], 0), grouped = m[3], group_cap = m[4], parked_cap = m[5],
    max_in_flight = m[6], rate_max = m[7], rate_per_ms = m[8], room_wanted = m[11], delayed_due = m[12],
    flows = m[13]}
end

-- Delayed jobs due by now join their lines, when META "delayed_due" says some may be (include/
-- base.lua); then delayed_due is the next one's due time, or "" for none, unless the limit left
-- some due ones behind.
local function promote_if_due(meta, now, limit)
  local due_at = meta.delayed_due
  if due_at == '' or (due_at and tonumber(due_at) > now) then return end
  local _, found = promote_due(now, limit)
  if found >= limit then return end
  local next_one = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
  meta.delayed_due = next_one[2] or ''
  -- Never META of a queue that has no keys: a lease must not start a queue (its first enqueue
  -- admits it to the registry, and a queue with keys is taken as admitted).
  if next_one[2] or redis.call('EXISTS', META) == 1 then delayed_due_written = meta.delayed_due end
end

-- Lease up to ask.max_jobs waiting jobs to ask.worker: ask is the lease request as lease.lua's
-- ARGV[2] unpacked (lease_ids: max_jobs random tokens of @LEASE_ID_CHARS@ characters,
-- concatenated; request_id: the call's id, its record kept record_ms). Returns the lease
-- script's reply: {stale, retry_after_ms (0: none), then 10 entries per leased job}. now: the
-- time (ms). meta: read_queue_meta()'s table when the caller read it (else read here);
-- member: the worker is in WORKERS already (an ack of this call left it there).
local function lease_jobs(ask, now, meta, member)
  local worker, lease_ms, max_jobs = ask.worker, ask.lease_ms, ask.max_jobs
  local lease_ids, request_id, record_ms = ask.lease_ids, ask.request_id, ask.record_ms
  local lease_ms_text = text(lease_ms)
  local request = request_key(worker, request_id)
  local earlier = redis.call('GET', request)
  if earlier then
    if string.sub(earlier, 1, 1) == ANSWERED_AGAIN then
      earlier = string.sub(earlier, 2)
    else
      redis.call('SET', request, ANSWERED_AGAIN .. earlier, 'KEEPTTL')
    end
    local reply = {0, 0}
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
  meta = meta or read_queue_meta()
  -- The worker's session: a quiet one leases nothing; a lapsed one the sweep has not yet taken
  -- is bound here, before this lease, so that its lapse leaves this lease alone (sweep.lua).
  local session = redis.call('HMGET', session_key(worker), 'state', 'expires_at', 'lapsed_fence')
  if session[2] then
    if tonumber(session[2]) > now then
      if session[1] == 'quiet' then return {0, 0} end
    elseif not session[3] then
      redis.call('HSET', session_key(worker), 'lapsed_fence', text(meta.fence))
    end
  end
  if meta.paused then return {0, 0} end
  local grouped = meta.grouped ~= false
  if grouped then
    groups().queue_cap = tonumber(meta.group_cap or '') or math.huge
    if (meta.group_cap or '') ~= (meta.parked_cap or '') then
      ring().unpark(meta.group_cap or '')
      meta.parked_cap = redis.call('HGET', META, 'parked_cap')
    end
  end
  promote_if_due(meta, now, max_jobs)
  local asked = max_jobs
  local flow = flow_room(max_jobs, {meta.max_in_flight, meta.rate_max, meta.rate_per_ms}, now)
  max_jobs = flow[1]
  if max_jobs == 0 then
    local reply = {stale_entries, 0}
    flow_after(flow, 0, asked, reply, now, meta)
    return reply
  end

  local expires_at = now + lease_ms
  local now_text, expires_text = text(now), text(expires_at)
  local fence = meta.fence
  local leased, deadlines, held, record = {}, {}, {}, {}
  local events = events_on()
  local event_worker = ' "worker":"' .. worker .. '","attempt":'
  local event_expiry = ',"lease_expires_at":' .. expires_text
  local reply = {0, 0}
  -- A dropped entry leaves room for another job: a few more rounds, never an unbounded loop.
  for _ = 1, 4 do
    local ids = take_waiting(max_jobs - #leased, grouped)
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
        local fence_text, attempt_text = text(fence), text(attempt)
        redis.call('HSET', key, 'state', 'active', 'attempt', attempt_text, 'worker', worker,
          'lease_id', lease_id, 'lease_ms', lease_ms_text, 'leased_at', now_text, 'lease_expires_at', expires_text,
          'fence', fence_text, 'updated_at', now_text)
        redis.call('SET', lock_key(id), lease_id .. ':' .. worker, 'PX', lease_ms_text)
        leased[i] = id
        deadlines[2 * i - 1], deadlines[2 * i] = expires_text, id
        held[2 * i - 1], held[2 * i] = fence_text, id
        record[i] = id .. ' ' .. lease_id
        append_job(reply, id, job, attempt, lease_id, expires_at, fence)
        if events then
          emit_line('leased ' .. id .. event_worker .. attempt_text .. ',"fence":' .. fence_text .. event_expiry)
        end
      end
    end
    if #leased == max_jobs then break end
  end
  reply[1] = stale_entries
  flow_after(flow, #leased, asked, reply, now, meta)
  if #leased == 0 then return reply end

  -- Newest lease on the left, in leasing order, as one LMOVE per job would have left them.
  redis.call('LPUSH', ACTIVE, unpack(leased))
  redis.call('ZADD', DEADLINES, unpack(deadlines))
  sweep_needed_by(expires_at)
  redis.call('ZADD', held_key(worker), unpack(held))
  meta.fence = fence
  fence_written = text(fence)
  if not member then redis.call('SADD', WORKERS, worker) end
  redis.call('SET', request, table.concat(record, ' '), 'PX', record_ms)
  return reply
end
