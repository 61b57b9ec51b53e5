-- Several lease requests of one queue, each with the acks it carries (none for a plain lease),
-- in one call: what the service makes of concurrent single calls (leases, acks with
-- lease_next) that reached it in the same moment (core/merging.py). Each entry does, in order,
-- exactly what lease.lua or ack_lease.lua would have done alone, and answers what it would have
-- answered: the entries see each other's effects as calls run one after the other would.
-- KEYS[1..11] the queue's keys (see include/base.lua)
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     msgpack array of entries (at most the service's merge limit), each a map:
--               acks       array of [id, lease_id] pairs (empty for a plain lease)
--               ask        the lease request, as lease.lua's ARGV[2]
--               all_taken  true: lease only if every ack was taken (ack_lease.lua's "1")
-- ARGV[3..]   every ack's result as raw JSON, the entries' acks in order; "" = no result
-- Returns     per entry: the number of values of its answer, then its answer: ack_lease.lua's
--             reply (lease.lua's for an entry without acks), or {WORKER_OWNED} alone
-- @include base
-- @include workers
-- @include events
-- @include ack
-- @include lease
-- @include flows
local entries = cmsgpack.unpack(ARGV[2])
local now = now_ms()
local meta = read_queue_meta() -- once for every entry, kept current by them (include/lease.lua)
local reply = {}
local results_from = 3
for _, entry in ipairs(entries) do
  local ask, acks = entry.ask, entry.acks
  local answer
  if not claim_worker(ask.worker, ask.owner, ask.lease_ms) then
    answer = {WORKER_OWNED}
  else
    local deferred = false
    answer = {}
    if #acks > 0 then answer, deferred = ack_jobs(acks, results_from, now, meta, ask.worker) end
    local leased = nil
    if not entry.all_taken or all_taken(answer) then
      stale_entries = 0 -- counted per entry: each answer reports its own
      leased = lease_jobs(ask, now, meta, deferred)
      for i = 1, #leased do answer[#answer + 1] = leased[i] end
    end
    if deferred and (not leased or #leased == 2) then worker_left(ask.worker) end
  end
  results_from = results_from + #acks
  reply[#reply + 1] = #answer
  for i = 1, #answer do reply[#reply + 1] = answer[i] end
end
return finish_and_deliver(reply, now)
