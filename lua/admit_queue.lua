-- Admit a queue to the registry of queues, within the service's cap on their number. The
-- registry is global (on a Cluster another slot than any queue's), so this is the one script
-- that takes not a queue's eleven keys but the registry alone.
-- KEYS[1]     the registry: SET of queue names (service.keys.QUEUE_REGISTRY)
-- ARGV[1]     the queue's name
-- ARGV[2]     the most queues the registry may hold (EMQ_MAX_QUEUES)
-- Returns     1: listed now; 0: it was listed already; TOO_MANY_QUEUES (-10): it is not listed
--             and the registry holds ARGV[2] queues or more (nothing changed)
local TOO_MANY_QUEUES = @TOO_MANY_QUEUES@ -- service/echomq_http/core/errors.py ScriptCode
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 0 end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return TOO_MANY_QUEUES end
return redis.call('SADD', KEYS[1], ARGV[1])
