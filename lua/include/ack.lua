-- Acknowledging finished jobs, for the scripts that do it (ack, ack-lease).
-- @include base
-- @include history
-- @include events
-- @include retention
-- @include ledger
-- @include children

-- META's fields an ack reads (the scripts that also lease read them with the lease's:
-- include/lease.lua read_queue_meta): room_wanted for detach, the events', and "flows" ("1" once
-- a job of the queue was made a flow's child: its acks then read the jobs' links).
local function read_ack_meta()
  local m = redis.call('HMGET', META, 'room_wanted', 'events_off', 'event_seq', 'flows')
  note_events_meta(m[2], m[3])
  return {room_wanted = m[1], flows = m[4]}
end

-- Each ack's job leaves the in-flight ledger (LREM) and becomes completed, if the ack's lease is
-- the job's live lease. Acking again with the lease that completed the job answers "already
-- completed", so a worker whose response was lost can retry safely.
-- acks: {{id, lease_id}, ...}; ARGV[results_from + i - 1]: the i-th ack's result as raw JSON,
-- "" = no result. Returns a flat array, 2 entries per ack: code (1 completed now, 2 already
-- completed by this lease, JOB_NOT_FOUND, LEASE_LOST) and, for code 1, how long the lease was
-- held (ms, lease to ack), else 0. Emits completed per job completed (count in the history).
-- meta, staying: as detach's (include/ledger.lua), meta read here when the caller did not; the
-- second value returned is detach's.
local function ack_jobs(acks, results_from, now, meta, staying)
  meta = meta or read_ack_meta()
  -- A job's flow fields are read only on a queue that has had children (META "flows").
  local flows = meta.flows
  local now_text = text(now)
  local reply = {}
  local departures = new_departures()
  local completed = {} -- ZADD arguments: score, id, ...
  local events = events_on()
  for i, ack in ipairs(acks) do
    local id, lease_id = ack[1], ack[2]
    local key = job_key(id)
    local job
    if flows then
      job = redis.call('HMGET', key, 'state', 'worker', 'leased_at', 'done_lease', 'lease_id', 'attempt', 'group',
        'parent', 'on_failure')
    else
      job = redis.call('HMGET', key, 'state', 'worker', 'leased_at', 'done_lease', 'lease_id', 'attempt', 'group')
    end
    local result = ARGV[results_from + i - 1]
    local code, held_ms = 0, 0
    if not job[1] then
      code = JOB_NOT_FOUND
    elseif job[5] == lease_id and job[2] and redis.call('DEL', lock_key(id)) == 1 then
      -- The lease's own id and an unexpired lock: holds_lease in one call fewer, as the lock
      -- always names the lease_id and worker of the hash while it exists (both set by lease).
      held_ms = now - tonumber(job[3])
      leave_ledger(departures, id, key, job[2], true, job[7])
      if result ~= '' then
        redis.call('HSET', key, 'state', 'completed', 'done_lease', lease_id, 'finished_at', now_text,
          'updated_at', now_text, 'result', result)
      else
        redis.call('HSET', key, 'state', 'completed', 'done_lease', lease_id, 'finished_at', now_text,
          'updated_at', now_text)
      end
      completed[#completed + 1] = now_text
      completed[#completed + 1] = id
      if events then emit_line('completed ' .. id .. ' "worker":"' .. job[2] .. '","attempt":' .. (job[6] or '0')) end
      if job[8] then child_finished(key, id, job[8], job[9], 'c', result ~= '' and result or 'null') end
      code = 1
    elseif job[1] == 'completed' and job[4] == lease_id then
      code = 2
    else
      code = LEASE_LOST
    end
    reply[#reply + 1] = code
    reply[#reply + 1] = held_ms
  end
  local deferred = detach(departures, meta, staying)
  record_completed(completed, now)
  count_history('completed', #completed / 2)
  return reply, deferred
end

-- Whether every ack of ack_jobs' reply was taken (code 1 or 2).
local function all_taken(reply)
  for i = 1, #reply, 2 do
    if reply[i] <= 0 then return false end
  end
  return true
end
