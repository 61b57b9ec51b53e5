-- Jobs in flight: whether a lease is the job's live one, and taking jobs out of the in-flight
-- ledger and out of everything that attributes them to their workers.
-- @include base
-- @include workers
-- @include events
-- @include groups

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

-- A worker whose held set is left empty leaves WORKERS, except `staying`, a worker that leases
-- again in the same call (an ack with lease_next): its check is left to that call (returns
-- true when it was left). meta: META's fields as include/lease.lua read_queue_meta read them,
-- when the caller did (else read here).
local function worker_left(worker)
  if redis.call('ZCARD', held_key(worker)) == 0 then redis.call('SREM', WORKERS, worker) end
end

local function detach(departures, meta, staying)
  if #departures.ids == 0 then return false end
  if not departures.out_of_ledger then remove_from_ledger(departures.ids) end
  call_chunked('ZREM', DEADLINES, departures.ids)
  local deferred = false
  for _, worker in ipairs(departures.workers) do
    call_chunked('ZREM', held_key(worker), departures.by_worker[worker])
    if worker == staying then deferred = true else worker_left(worker) end
  end
  -- A lease that max_in_flight held back left META "room_wanted" (lease.lua): these jobs free
  -- slots, so the queue's long polls are woken. Without a cap, this read is all it costs (and
  -- it reads the events' fields of META for flush_events).
  local room_wanted
  if meta then
    room_wanted, meta.room_wanted = meta.room_wanted, false
  else
    local fields = redis.call('HMGET', META, 'room_wanted', 'events_off', 'event_seq')
    note_events_meta(fields[2], fields[3])
    room_wanted = fields[1]
  end
  if room_wanted then
    redis.call('HDEL', META, 'room_wanted')
    wake_waiters(#departures.ids)
  end
  if departures.groups then groups().free(departures) end
  return deferred
end

-- Both steps for one job.
local function leave_ledger_now(id, key, worker, group)
  local departures = new_departures()
  leave_ledger(departures, id, key, worker, nil, group)
  detach(departures)
end
