-- Deliver finished children's outcomes to their parents in this queue: what the sweep takes
-- from a child queue's outbox (include/flows.lua), for parents that lived in another slot (a
-- Cluster) or were out of reach of the child's call (a call by EVAL). Each delivery is applied
-- at most once (a repeat, after a crash between this call and the outbox's trim, changes
-- nothing): a waiting_children parent moves as in the child's own call would have moved it.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes the parents' hashes, their KIDRES,
--             WAIT, PRIO, DELAYED, FAILED, DUE, WAITING_CHILDREN and this queue's outbox (a
--             parent that fails by its child is a child in turn)
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2..]   outbox entries, each as include/flows.lua outbox_entry wrote it, of parents in this
--             queue (at most 1000)
-- Emits children_completed, or failed with reason child_failed, per parent that moved.
-- Returns     the number of entries given
-- @include base
-- @include flows
local now = now_ms()
for i = 2, #ARGV do
  local delivery = delivery_of(ARGV[i])
  if delivery[1] == PREFIX then deliver(delivery, now) end
end
return finish_and_deliver(#ARGV - 1, now)
