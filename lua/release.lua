-- Holders give jobs back: each leaves the ledger and is leased next (front of its priority), and
-- the delivery does not count as an attempt. The same release again (same job, same lease id)
-- answers as the first did and changes nothing, so a worker whose answer was lost can retry.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes ACTIVE, DEADLINES, WORKERS,
--             WAIT or PRIO (a grouped job: its group's line), META, publishes on WAKE
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     JSON array of [id, lease_id] pairs (at most 100: what one lease hands out)
-- A job whose cancellation was requested ends cancelled instead (code 3). Emits released or
-- cancelled.
-- ARGV[3..4]  optional: worker and request id of the lease request whose jobs the pairs are, given
--             back by the service because its answer never reached the client (a hang-up, an
--             unconfirmed write). Unless a retry of that request was answered them meanwhile
--             (its record is marked: include/lease.lua), they are released and the record
--             deleted, so that a retry leases anew; else nothing changes (every code 0).
-- Returns     one code per pair: 1 released, 2 already released by this lease, 3 cancelled (now or
--             by this lease before), -1 job not found, -2 lease lost, 0 kept for the retry
-- @include base
-- @include workers
-- @include events
-- @include retention
-- @include waiting
-- @include ledger
-- @include flows
local pairs_ = cjson.decode(ARGV[2])
if ARGV[4] then
  local request = request_key(ARGV[3], ARGV[4])
  if string.sub(redis.call('GET', request) or '', 1, 1) == ANSWERED_AGAIN then
    local kept = {}
    for i = 1, #pairs_ do kept[i] = 0 end
    return kept
  end
  redis.call('DEL', request)
end
local now = now_ms()
local departures = new_departures()
local codes, returning = {}, {}
for i, pair in ipairs(pairs_) do
  local id, lease_id = pair[1], pair[2]
  local key = job_key(id)
  local job = redis.call('HMGET', key, 'state', 'worker', 'priority', 'done_lease', 'cancel_requested', 'cancel_reason',
    'group')
  if not job[1] then
    codes[i] = JOB_NOT_FOUND
  elseif job[5] and holds_lease(id, lease_id, job[2]) then
    leave_ledger(departures, id, key, job[2], nil, job[7])
    cancel_job(id, key, now, job[6])
    redis.call('HSET', key, 'done_lease', lease_id .. ':release-cancelled')
    codes[i] = 3
  elseif holds_lease(id, lease_id, job[2]) then
    leave_ledger(departures, id, key, job[2], nil, job[7])
    redis.call('HSET', key, 'state', 'waiting', 'redeliver', 1, 'updated_at', now,
      'done_lease', lease_id .. ':release')
    returning[#returning + 1] = {id, number_or(job[3], 0), job[7]}
    emit('released', id, '"worker":"' .. job[2] .. '"')
    codes[i] = 1
  elseif ended_as(job[4], lease_id) == 'release' then
    codes[i] = 2
  elseif ended_as(job[4], lease_id) == 'release-cancelled' then
    codes[i] = 3
  else
    codes[i] = LEASE_LOST
  end
end
detach(departures)
-- The last given back goes in front last: the first of the batch ends up first in line.
for i = #returning, 1, -1 do push_waiting(returning[i][1], returning[i][2], true, returning[i][3]) end
wake_waiters(#returning)
return finish_and_deliver(codes, now)
