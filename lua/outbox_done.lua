-- Take delivered entries out of the queue's outbox (include/flows.lua): each once, wherever it
-- is (the sweeps of two processes may deliver the same entries; a repeat takes nothing more).
-- KEYS[1..11] the queue's keys (see include/base.lua); derives the outbox from the prefix
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2..]   the entries delivered (at most 1000)
-- Returns     how many were still there
-- @include base
-- @include flows
local outbox, taken = outbox_key(), 0
for i = 2, #ARGV do taken = taken + redis.call('LREM', outbox, 1, ARGV[i]) end
return taken
