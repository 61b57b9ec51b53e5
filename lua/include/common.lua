-- Shared by every script; the loader (service/echomq_http/store/scripts.py) inlines it where a script says
-- "@include common" and fills in the placeholders between at-signs (service/echomq_http/store/scripts.py).
-- Every script takes the same eleven KEYS, in the order of service.keys.QueueKeys.script_keys,
-- and ARGV[1] = the queue's key prefix "emq:{queue}:". Per-job and per-worker keys are derived
-- from that prefix, so they carry the same hash tag and live in the queue's cluster slot.
-- KEYS[11] is the due index the sweeper reads: one key on a single server, on a Cluster a key
-- of the queue's own slot (service.keys.due_index_key).
local META, WAIT, PRIO, DELAYED, ACTIVE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local DEADLINES, WORKERS, COMPLETED, FAILED, WAKE = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local DUE = KEYS[11]
local PREFIX = ARGV[1]
local QUEUE = string.sub(PREFIX, @QUEUE_NAME_START@, -3) -- "emq:{" name "}:"

local JOB_NOT_FOUND = -1
local LEASE_LOST = -2
local JOB_ACTIVE = -3
local NO_SESSION = -4
local SCHEDULE_NOT_FOUND = -5
local SCHEDULE_MOVED = -6
local NOT_DELAYED = -7
local WORKER_OWNED = -8
local NEW_QUEUE = -9

-- Waiting jobs with priority > 0 sit in PRIO scored (MAX_PRIORITY - priority) * BAND + offset,
-- so higher priorities come first. Within a band, jobs handed back (release, sweep) get offsets
-- below MIDDLE (leased next) and new or retried jobs offsets above it (FIFO). All scores stay
-- below 2^53, so doubles hold them exactly.
local MAX_PRIORITY = @MAX_PRIORITY@
local PRIORITY_BAND = 8796093022208 -- 2^43
local PRIORITY_MIDDLE = 4398046511104 -- 2^42

-- A job's hash leaves out fields that hold their default (absent: name "", priority 0, attempt 0,
-- these max_attempts and backoff, updated_at = created_at): a queued job costs less memory.
local DEFAULT_MAX_ATTEMPTS = @DEFAULT_MAX_ATTEMPTS@
local DEFAULT_BACKOFF_MS = @DEFAULT_BACKOFF_MS@
local function number_or(value, default) return value and tonumber(value) or default end

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

-- Lua's unpack refuses more than about 8,000 values, and Redis does not roll back a script that
-- fails halfway: every variadic command over a list that can grow is sent in chunks of this many
-- values (even, so that score/member pairs are never split).
local CHUNK = 4000

-- Index entries that named no job in the state the index stands for (skipped, never acted on);
-- scripts that can meet one report this count (service.queue counts them in a metric).
local stale_entries = 0

-- A number passed to redis.call is turned into text with "%.14g" (a slow float format, a
-- good part of a batch's time in Redis): hot paths pass integers as text made once with "%d".
local function text(n) return string.format('%d', n) end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function job_key(id) return PREFIX .. id .. '@JOB_SUFFIX@' end
local function lock_key(id) return PREFIX .. id .. '@LOCK_SUFFIX@' end
local function held_key(worker) return PREFIX .. worker .. '@HELD_SUFFIX@' end
local function session_key(worker) return PREFIX .. worker .. '@SESSION_SUFFIX@' end
-- Live sessions by when they lapse, and lapses not yet swept (scored when they became due): the
-- sweep finds lapsed sessions with one ZRANGEBYSCORE, never a scan of the workers.
local SESSIONS = PREFIX .. '@SESSIONS_NAME@'
-- A worker name's owner record: the id of the token the name belongs to, with a PX TTL.
local function owner_key(worker) return PREFIX .. worker .. '@OWNER_SUFFIX@' end
local WORKER_OWNER_GRACE_MS = @WORKER_OWNER_GRACE_MS@
-- A worker name belongs to the token that uses it first (README, Security, "Worker names"). Its
-- owner record lasts as long as any lease or session the token made for it, plus
-- WORKER_OWNER_GRACE_MS: every lease, job heartbeat and session heartbeat of the token makes it
-- last at least keep_ms (the lease's or session's length) more, so that no other token can take
-- the name while its jobs or session are alive; then the name is free again. owner: the calling
-- token's id, "" when tokens are off or the caller is an admin (nothing checked, nothing
-- claimed). Returns false when the name belongs to another token, else true (claimed or kept).
local function claim_worker(worker, owner, keep_ms)
  if owner == '' then return true end
  local key, ttl_ms = owner_key(worker), keep_ms + WORKER_OWNER_GRACE_MS
  local current = redis.call('GET', key)
  if not current then
    redis.call('SET', key, owner, 'PX', text(ttl_ms))
  elseif current ~= owner then
    return false
  elseif redis.call('PTTL', key) < ttl_ms then
    redis.call('PEXPIRE', key, text(ttl_ms))
  end
  return true
end
-- For a call that acts for the worker without making it hold anything (ending its session).
local function owned_by_another(worker, owner)
  if owner == '' then return false end
  local current = redis.call('GET', owner_key(worker))
  return current ~= false and current ~= owner
end
local function request_key(worker, request_id) return PREFIX .. worker .. ':' .. request_id .. '@REQUEST_SUFFIX@' end
-- A request's record is marked (its first character) once a retry has been answered from it, so
-- that the service's give-back of the first answer's jobs (lease.lua, release-11.lua) leaves
-- them to the retry. Records otherwise start with a job id, which never contains ':'.
local ANSWERED_AGAIN = ':'

-- key: the command's first argument, or nil when the values are the keys (DEL).
local function call_chunked(command, key, values)
  for first = 1, #values, CHUNK do
    local last = math.min(first + CHUNK - 1, #values)
    if key then
      redis.call(command, key, unpack(values, first, last))
    else
      redis.call(command, unpack(values, first, last))
    end
  end
end

-- Events: what a call did, as lines "<type> <job id, or - for the queue> <JSON members>" (the
-- members of the event's data object after type, queue, id and at, which the service adds), all
-- of one call in one entry of the queue's stream EVENTS: an event is written in the same script
-- as its transition, and a batch costs one XADD. Events are numbered 1, 2, 3... per queue (META
-- "event_seq"); an entry's id is "0-<number of its last event>", so an entry holds the events
-- from the previous entry's number + 1 to its own. At least EVENTS_MAXLEN events are kept
-- (approximate trimming by MINID: whole stream nodes at a time); 0 turns events off, and so does
-- a queue's own setting (META "events_off") for that queue.
local EVENTS = PREFIX .. '@EVENTS_NAME@'
local EVENTS_MAXLEN = @EVENTS_MAXLEN@
-- META's events_off and event_seq, when the script read them with other fields of META (its
-- events are flushed in the same call, so nothing else changed them): a read fewer.
local events_meta = nil
local function note_events_meta(off, seq)
  events_meta = {off ~= false and off ~= nil, number_or(seq, 0)}
end

local event_lines = {}
local function emit(kind, id, members)
  if EVENTS_MAXLEN > 0 then event_lines[#event_lines + 1] = kind .. ' ' .. id .. ' ' .. members end
end

-- For the loops over a batch of jobs: whether this call's events are written (false when they
-- are off, or off for the queue as far as the script read META), and a line built whole by the
-- caller ("<type> <id> <members>", one concatenation per job rather than two).
local function events_on() return EVENTS_MAXLEN > 0 and not (events_meta and events_meta[1]) end
local function emit_line(line) event_lines[#event_lines + 1] = line end

-- The stream is trimmed (MINID) only by the entries that cross a multiple of EVENTS_TRIM_EVERY
-- events, not by every one: the trim is a third of an XADD's cost, and it keeps the stream at
-- most EVENTS_TRIM_EVERY events (and a stream node) longer than EVENTS_MAXLEN.
local EVENTS_TRIM_EVERY = math.max(1, math.min(256, math.floor(EVENTS_MAXLEN / 8)))
local function stream_entry_args(last, count, at)
  local id, data = '0-' .. text(last), table.concat(event_lines, '\n')
  if math.floor(last / EVENTS_TRIM_EVERY) == math.floor((last - count) / EVENTS_TRIM_EVERY) then
    return {'XADD', EVENTS, id, 'at', at, 'e', data}
  end
  return {'XADD', EVENTS, 'MINID', '~', '0-' .. text(math.max(last - EVENTS_MAXLEN + 1, 0)), id, 'at', at, 'e', data}
end

-- One stream entry for the events emitted so far (none: nothing written). at: the time (ms text).
local function flush_events(at)
  local count = #event_lines
  if count == 0 then return end
  -- A queue whose settings turned its events off (META "events_off") writes none.
  if not events_meta then
    local meta = redis.call('HMGET', META, 'events_off', 'event_seq')
    note_events_meta(meta[1], meta[2])
  end
  if not events_meta[1] then
    local last = events_meta[2] + count
    local written = redis.pcall(unpack(stream_entry_args(last, count, at)))
    if type(written) == 'table' and written.err then
      -- The stream is ahead of the counter (META was deleted, the stream was not): go on from
      -- the stream's last id, so that event numbers never go back.
      local info = redis.call('XINFO', 'STREAM', EVENTS)
      for i = 1, #info, 2 do
        if info[i] == 'last-generated-id' then
          last = tonumber(string.match(info[i + 1], '%-(%d+)$')) + count
        end
      end
      redis.call(unpack(stream_entry_args(last, count, at)))
    end
    redis.call('HSET', META, 'event_seq', text(last))
  end
  event_lines = {}
end

-- A JSON string (error texts; names and ids never need escaping: their pattern excludes it).
local function json_text(value)
  if value == nil or value == false then return 'null' end
  return cjson.encode(value)
end

-- Per-minute counts of what happened, kept 24 hours: HISTORY "<minute ms>:<kind>" for the kinds
-- enqueued, completed, failed (dead-lettered) and reclaimed. The first count of a minute deletes
-- the fields of the minutes that fell out of the 24 hours since the last first count ("last").
local HISTORY = PREFIX .. '@HISTORY_NAME@'
local HISTORY_KINDS = {'enqueued', 'completed', 'failed', 'reclaimed'}
local HISTORY_MINUTES = 1440
local history_counts = {}
local function count_history(kind, n)
  history_counts[kind] = (history_counts[kind] or 0) + n
end

local function flush_history(now)
  local minute = now - now % 60000
  local first_of_minute = false
  for kind, n in pairs(history_counts) do
    if n > 0 and redis.call('HINCRBY', HISTORY, text(minute) .. ':' .. kind, n) == n then first_of_minute = true end
  end
  history_counts = {}
  if not first_of_minute then return end
  local last = tonumber(redis.call('HGET', HISTORY, 'last') or (minute - 60000))
  if last >= minute then return end
  local stale = {}
  local from = math.max(last, minute - 2 * HISTORY_MINUTES * 60000) - HISTORY_MINUTES * 60000 + 60000
  for old = from, minute - HISTORY_MINUTES * 60000, 60000 do
    for _, kind in ipairs(HISTORY_KINDS) do stale[#stale + 1] = text(old) .. ':' .. kind end
  end
  call_chunked('HDEL', HISTORY, stale)
  redis.call('HSET', HISTORY, 'last', text(minute))
end

-- Every script that emits events or counts history ends with this.
local function finish(reply, now)
  flush_events(text(now))
  flush_history(now)
  return reply
end

-- The queue's entry in the due index: when its next sweep has work to do (a lease expires, a
-- delayed job is due, a finished job's retention ends). Transitions that make such work only
-- ever bring it forward (LT); the sweep sets it exactly and removes a queue with nothing ahead,
-- so the sweeper never visits a quiet queue.
local function sweep_needed_by(at_ms) redis.call('ZADD', DUE, 'LT', at_ms, QUEUE) end

local function wake_waiters(count)
  -- PUBLISH, or SPUBLISH on a Cluster (the channel is KEYS[10], so it shares the queue's slot)
  if count > 0 then redis.call('@PUBLISH@', WAKE, count) end
end

-- The queue's waiting jobs: WAIT less its tombstones, PRIO, and the grouped ones (META
-- "group_waiting", counted by the groups' helpers below).
local function waiting_count()
  local meta = redis.call('HMGET', META, 'wait_tombstones', 'group_waiting')
  return redis.call('LLEN', WAIT) - number_or(meta[1], 0) + redis.call('ZCARD', PRIO) + number_or(meta[2], 0)
end

-- Groups. A grouped job waits in its group's ZSET (group_wait_key: scored like PRIO, so by
-- priority, then handed-back jobs first, then first in first out); its group's HASH (group_key)
-- counts its jobs in the ledger ("active"), holds the group's own cap ("max"; else META
-- "group_max_in_flight" applies; none: no cap) and says whether it is in RING ("ring").
-- RING is the LIST leases take turns from, one job per turn: a member is popped from the right
-- and pushed back on the left while it has waiting jobs and room. Its members are the groups
-- with waiting jobs and room, and UNGROUPED, which stands for the jobs without a group (WAIT and
-- PRIO: a group of their own, without a cap) from the queue's first group on (META "grouped";
-- until then leases take from WAIT and PRIO as they always did). A group at its cap is out of
-- RING, so it costs a lease nothing, until one of its jobs leaves the ledger (detach) and puts
-- it back. META "group_waiting" counts the grouped waiting jobs; GROUPS indexes the groups by
-- name (all scores 0): every group with waiting or active jobs or a cap of its own (a group with
-- none of these is forgotten). PARKED (by name too) holds the groups that were kept out of RING
-- by their cap while jobs of theirs were waiting, so that a change of the queue's
-- group_max_in_flight reaches them (include/lease.lua ring_helpers, unpark); an entry of a group that
-- is back in RING is dropped by the next such pass.
-- The helpers are made on first use (groups()): every top-level definition costs each call of a
-- script a closure, and a queue without groups must not pay for a dozen of them.
local function group_helpers()
  local g = {
    RING = PREFIX .. '@RING_NAME@',
    GROUPS = PREFIX .. '@GROUPS_NAME@',
    PARKED = PREFIX .. '@PARKED_NAME@',
    UNGROUPED = ':', -- never a group's name (names have no ':')
  }
  function g.wait_key(group) return PREFIX .. group .. '@GROUP_WAIT_SUFFIX@' end
  function g.key(group) return PREFIX .. group .. '@GROUP_SUFFIX@' end

  -- The queue's group_max_in_flight (math.huge: none), read at most once per call (the lease
  -- sets it from its own read of META).
  function g.cap(own_max)
    if own_max then return tonumber(own_max) end
    if g.queue_cap == nil then
      g.queue_cap = tonumber(redis.call('HGET', META, 'group_max_in_flight') or '') or math.huge
    end
    return g.queue_cap
  end

  -- A group's hash fields {active, max, ring}.
  function g.fields(group) return redis.call('HMGET', g.key(group), 'active', 'max', 'ring') end

  -- A group seen for the first time: indexed; the queue's first group also starts RING, with
  -- the ungrouped jobs' member in it.
  function g.new(group)
    redis.call('ZADD', g.GROUPS, 0, group)
    if redis.call('HSETNX', META, 'grouped', 1) == 1 then redis.call('RPUSH', g.RING, g.UNGROUPED) end
  end

  -- Puts a group into RING when it is out of it and has waiting jobs and room. fields: its
  -- hash's {active, max, ring}; waiting: its waiting jobs. Returns 1 when it went in, else 0.
  function g.ring(group, fields, waiting)
    if fields[3] or waiting == 0 or number_or(fields[1], 0) >= g.cap(fields[2]) then return 0 end
    redis.call('LPUSH', g.RING, group)
    redis.call('HSET', g.key(group), 'ring', 1)
    fields[3] = '1'
    return 1
  end

  -- Forgets a group with nothing waiting, nothing in the ledger, no cap of its own, out of RING.
  function g.forget_if_idle(group, fields, waiting)
    if waiting == 0 and number_or(fields[1], 0) <= 0 and not fields[2] and not fields[3] then
      redis.call('DEL', g.key(group))
      redis.call('ZREM', g.GROUPS, group)
      redis.call('ZREM', g.PARKED, group)
    end
  end

  -- A grouped job joins its group's line (score: its place, as in PRIO).
  function g.push(id, score, group)
    if redis.call('ZADD', g.wait_key(group), score, id) == 1 then
      redis.call('HINCRBY', META, 'group_waiting', 1)
    end
    local fields = g.fields(group)
    if not (fields[1] or fields[2] or fields[3]) then g.new(group) end
    if g.ring(group, fields, 1) == 0 and not fields[3] then redis.call('ZADD', g.PARKED, 0, group) end
  end

  -- A waiting job of a group leaves its line (cancelled, deleted). A group left empty in RING
  -- stays there until a lease meets it (taking it out of RING would be an LREM over RING).
  function g.unqueue(id, group)
    if redis.call('ZREM', g.wait_key(group), id) == 0 then return end
    redis.call('HINCRBY', META, 'group_waiting', -1)
    g.forget_if_idle(group, g.fields(group), redis.call('ZCARD', g.wait_key(group)))
  end

  -- Jobs left the ledger (departures.by_group: how many of each group): their groups have room
  -- again, and each that has waiting jobs goes back into RING; long polls are woken for them.
  function g.free(departures)
    local ringed = 0
    for _, group in ipairs(departures.groups) do
      local key = g.key(group)
      if redis.call('HINCRBY', key, 'active', -departures.by_group[group]) < 0 then
        redis.call('HSET', key, 'active', 0)
      end
      local fields = g.fields(group)
      local waiting = redis.call('ZCARD', g.wait_key(group))
      ringed = ringed + g.ring(group, fields, waiting)
      g.forget_if_idle(group, fields, waiting)
    end
    wake_waiters(ringed)
  end
  return g
end

local group_helpers_made = nil
local function groups()
  if not group_helpers_made then group_helpers_made = group_helpers() end
  return group_helpers_made
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
      -- right end since its page (lua/list-jobs-11.lua).
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
-- job listing's cursor always finds its anchor where it was (lua/list-jobs-11.lua). META
-- "wait_tombstones" counts them (counts subtract it); a lease drops those it pops.
local WAIT_TOMBSTONE = ':' -- ids never contain ':'
local function bury_waiting(id)
  local at = redis.call('LPOS', WAIT, id)
  if not at then return end
  redis.call('LSET', WAIT, at, WAIT_TOMBSTONE .. id)
  redis.call('HINCRBY', META, 'wait_tombstones', 1)
end

-- True when lease_id is the job's current, unexpired lease: the lock exists and names it (the
-- lock is "<lease_id>:<worker>", set by lease, and exists only while that lease lasts).
local function holds_lease(id, lease_id, worker)
  return worker ~= false and worker ~= nil and redis.call('GET', lock_key(id)) == lease_id .. ':' .. worker
end

-- What a lease's end leaves in the job's hash: done_lease is the lease id for an ack (so a
-- repeated ack answers again), "<lease_id>:<what>" for a fail or a release (so a repeat of the
-- same call answers as the first did, and no other transition is taken for it).
local function ended_as(done_lease, lease_id)
  local mark = lease_id .. ':'
  if done_lease and string.sub(done_lease, 1, #mark) == mark then return string.sub(done_lease, #mark + 1) end
  return nil
end

-- The ledger is the seed's LIST, and only LREM takes a job out of it: one LREM per job scans
-- from the oldest end, where most finishing jobs are. For many jobs at once, one scan finds
-- them all (find_in_ledger, windows of LRANGE from one end), each is marked with a tombstone
-- (LSET) and one LREM takes the tombstones out (cut_from_ledger): one pass over the ledger for
-- the batch instead of one per job. Long operations (the sweep, an operator release) scan at
-- most LEDGER_STEP_SCAN entries per step, from where their previous step stopped.
local LEDGER_TOMBSTONE = ':' -- never a job id (ids have no ':')
local LEDGER_WINDOW_MAX = 4096 -- windows start at twice the jobs sought and double up to this
local LEDGER_SCAN_FROM = 32 -- jobs per batch from which one scan can beat an LREM each...
local LEDGER_SCAN_ABOVE = 1024 -- ...in a ledger this long (shorter: an LREM never goes far)
local LEDGER_STEP_SCAN = 16384 -- entries one step of a long operation reads (~3 ms)

-- Looks for the ids of `wanted` (a set of `left` ids) among at most `budget` ledger entries,
-- starting `offset` entries past the oldest end (the newest, when from_newest). Returns the
-- ids found with their LSET index ({id, index} pairs, in scan order), how many entries it read,
-- and whether it reached the other end. Found ids are taken out of `wanted`; nothing is written.
local function find_in_ledger(wanted, left, offset, budget, from_newest)
  local found, scanned, reached_end = {}, 0, false
  local size = math.min(budget, math.max(64, 2 * left))
  while left > 0 and scanned < budget do
    local first = offset + scanned
    local window
    if from_newest then
      window = redis.call('LRANGE', ACTIVE, first, first + size - 1)
    else
      window = redis.call('LRANGE', ACTIVE, -(first + size), -(first + 1))
    end
    local n = #window
    for k = 1, n do -- k-th entry away from the chosen end
      local id = window[from_newest and k or n - k + 1]
      if wanted[id] then
        wanted[id] = nil
        left = left - 1
        found[#found + 1] = {id, from_newest and first + k - 1 or -(first + k)}
      end
    end
    scanned = scanned + n
    if n < size then
      reached_end = true
      break
    end
    size = math.min(2 * size, LEDGER_WINDOW_MAX, budget - scanned)
  end
  return found, scanned, reached_end
end

-- Takes the entries at these LSET indexes (from one find_in_ledger) out of the ledger.
local function cut_from_ledger(indexes, from_newest)
  if #indexes == 0 then return end
  for _, index in ipairs(indexes) do redis.call('LSET', ACTIVE, index, LEDGER_TOMBSTONE) end
  redis.call('LREM', ACTIVE, from_newest and #indexes or -#indexes, LEDGER_TOMBSTONE)
end

local function remove_from_ledger(ids)
  if #ids < LEDGER_SCAN_FROM or redis.call('LLEN', ACTIVE) <= LEDGER_SCAN_ABOVE then
    for _, id in ipairs(ids) do redis.call('LREM', ACTIVE, -1, id) end
    return
  end
  local wanted, left = {}, 0
  for _, id in ipairs(ids) do
    if not wanted[id] then
      wanted[id] = true
      left = left + 1
    end
  end
  local found = find_in_ledger(wanted, left, 0, math.huge, false)
  local indexes = {}
  for i, entry in ipairs(found) do indexes[i] = entry[2] end
  cut_from_ledger(indexes, false)
end

-- Taking jobs out of the in-flight ledger, and out of everything that attributes them to their
-- workers, in two steps: leave_ledger for each job, then detach once for all of them, which
-- batches the ledger, sorted-set and set removals (one pass or command per key, not per job).
-- out_of_ledger: the caller took the jobs out of the ledger itself (cut_from_ledger).
local function new_departures(out_of_ledger)
  return {ids = {}, by_worker = {}, workers = {}, out_of_ledger = out_of_ledger}
end

-- group: the job's group, false for none, nil when the caller did not read it (then read here).
local function leave_ledger(departures, id, key, worker, lock_deleted, group)
  if not lock_deleted then redis.call('DEL', lock_key(id)) end
  redis.call('HDEL', key, 'worker', 'lease_id', 'leased_at', 'lease_expires_at', 'lease_ms')
  departures.ids[#departures.ids + 1] = id
  if worker then
    local held = departures.by_worker[worker]
    if not held then
      held = {}
      departures.by_worker[worker] = held
      departures.workers[#departures.workers + 1] = worker
    end
    held[#held + 1] = id
  end
  if group == nil then group = redis.call('HGET', key, 'group') end
  if group then
    if not departures.groups then departures.groups, departures.by_group = {}, {} end
    local leaving = departures.by_group[group]
    if not leaving then departures.groups[#departures.groups + 1] = group end
    departures.by_group[group] = (leaving or 0) + 1
  end
end

local function detach(departures)
  if #departures.ids == 0 then return end
  if not departures.out_of_ledger then remove_from_ledger(departures.ids) end
  call_chunked('ZREM', DEADLINES, departures.ids)
  for _, worker in ipairs(departures.workers) do
    local held = held_key(worker)
    call_chunked('ZREM', held, departures.by_worker[worker])
    if redis.call('ZCARD', held) == 0 then redis.call('SREM', WORKERS, worker) end
  end
  -- A lease that max_in_flight held back left META "room_wanted" (lease.lua): these jobs free
  -- slots, so the queue's long polls are woken. Without a cap, this read is all it costs (and
  -- it reads the events' fields of META for flush_events).
  local meta = redis.call('HMGET', META, 'room_wanted', 'events_off', 'event_seq')
  note_events_meta(meta[2], meta[3])
  if meta[1] then
    redis.call('HDEL', META, 'room_wanted')
    wake_waiters(#departures.ids)
  end
  if departures.groups then groups().free(departures) end
end

-- Both steps for one job.
local function leave_ledger_now(id, key, worker, group)
  local departures = new_departures()
  leave_ledger(departures, id, key, worker, nil, group)
  detach(departures)
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

