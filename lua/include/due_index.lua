-- The due index: when a queue's next sweep has work to do.
-- @include base

-- The queue's entry in the due index: when its next sweep has work to do (a lease expires, a
-- delayed job is due, a finished job's retention ends). Transitions that make such work only
-- ever bring it forward (LT); the sweep sets it exactly and removes a queue with nothing ahead,
-- so the sweeper never visits a quiet queue.
local function sweep_needed_by(at_ms) redis.call('ZADD', DUE, 'LT', at_ms, QUEUE) end
