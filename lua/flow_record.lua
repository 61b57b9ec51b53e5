-- Keep or drop the record of a flow being made (core/flows.py): written before a flow's first
-- job, in its root's queue, and dropped once its last job is made, so that the sweep can finish
-- a creation cut short (the service or Redis died midway) by making it again, as a repeat of
-- the request would (docs/FLOWS-DESIGN.md). A record waits @FLOW_REPLAY_AFTER_MS@ ms before the
-- sweep takes it for cut short.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes DUE; derives FLOWS and the
--             record's key from the prefix
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     the root's id
-- ARGV[3]     the flow's request, its every id filled in (JSON text), to keep it; "" to drop
--             the record; "later" to put a record the sweep could not finish off for as long
--             again
-- Returns     1
-- @include base
-- @include flows
local id, request = ARGV[2], ARGV[3]
local now = now_ms()
if request == '' then
  redis.call('ZREM', flows_key(), id)
  redis.call('DEL', flow_record_key(id))
elseif request == 'later' then
  redis.call('ZADD', flows_key(), 'XX', now, id)
  sweep_needed_by(now + @FLOW_REPLAY_AFTER_MS@)
else
  redis.call('SET', flow_record_key(id), request)
  redis.call('ZADD', flows_key(), now, id)
  sweep_needed_by(now + @FLOW_REPLAY_AFTER_MS@)
end
return 1
