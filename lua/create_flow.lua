-- Make the nodes of a flow that live in this queue (POST /v1/flows). The service calls it once
-- per queue and level of the tree, top-down: a parent exists, waiting for every child it
-- declares, before any of them does, so no parent can run early, whatever order its children
-- then finish in (docs/FLOWS-DESIGN.md). A node already made (by an earlier, cut-short or
-- repeated request: the same id, the same parent link, the same declared children) is answered
-- as it is; a node whose id names any other job refuses the whole call before anything is
-- written.
-- KEYS[1..11] the queue's keys (see include/base.lua); writes WAIT, PRIO, DELAYED, DUE, META
--             (its "flows" flag once a child is made here), derives the jobs' hashes, their
--             children's KIDS and KIDRES, WAITING_CHILDREN and PARENTS from the prefix
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     JSON array (at most 1000), one object per node: enqueue.lua's job options plus
--             parent (the link "<parent's prefix> <parent id> <token>", absent for the root),
--             on_failure ("ignore"; absent: "fail"), children ([["<queue> <id>", "fail"|"ignore"],
--             ...] in the order declared; absent or empty: a leaf) and, for a node with
--             children, token (random characters: its kids_token if it is made now)
-- ARGV[3..]   the nodes' payloads as raw JSON, in the same order
-- ARGV[#nodes + 3] optional: "check" = only look: answers as below (state "" for a node not
--             made yet, its token the one it would get) and writes nothing
-- Emits enqueued per node made (state waiting_children for a parent); counts them in the history.
-- Returns     {3 entries per node: state, the parent's kids_token ("" for a leaf), created (1
--             made now, 0 made before)}, or {JOB_EXISTS (-11), index (1-based) of the first node
--             whose id names a job outside this flow}: nothing written
-- @include base
-- @include events
-- @include history
-- @include store
-- @include flows
local nodes = cjson.decode(ARGV[2])

-- The node as it was made before, if it was: {state, token}; false: its id is another job's.
local function made_before(node)
  local key = job_key(node.id)
  local job = redis.call('HMGET', key, 'state', 'parent', 'kids_token', 'kids_total')
  if not job[1] then return nil end
  if job[2] ~= (node.parent or false) then return false end
  local children = node.children or {}
  if #children == 0 then return job[3] == false and {job[1], ''} end
  if not job[3] or tonumber(job[4]) < #children then return false end
  local declared = redis.call('ZRANGE', kids_key(node.id), 0, #children - 1)
  for i, child in ipairs(children) do
    if declared[i] ~= child[1] then return false end
  end
  return {job[1], job[3]}
end

local before = {}
for i, node in ipairs(nodes) do
  local found = made_before(node)
  if found == false then return {JOB_EXISTS, i} end
  before[i] = found
end

if ARGV[#nodes + 3] == 'check' then
  local reply = {}
  for i, node in ipairs(nodes) do
    local found = before[i] or {'', node.token or ''}
    reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = found[1], found[2], 0
  end
  return reply
end

local now = now_ms()
local reply, leasable, made, unprioritised = {}, 0, 0, {}
for i, node in ipairs(nodes) do
  local state, token, created = nil, '', 0
  if before[i] then
    state, token = before[i][1], before[i][2]
  else
    local children = node.children or {}
    local fields = {}
    if node.parent then
      fields[#fields + 1], fields[#fields + 2] = 'parent', node.parent
      if node.on_failure == 'ignore' then fields[#fields + 1], fields[#fields + 2] = 'on_failure', 'ignore' end
    end
    local flow = {fields = fields, waiting_children = #children > 0}
    if #children > 0 then
      token = node.token
      local count = text(#children)
      for _, value in ipairs({'kids_token', token, 'kids_total', count, 'kids_pending', count}) do
        fields[#fields + 1] = value
      end
      if node.delay_ms > 0 then fields[#fields + 1], fields[#fields + 2] = 'after_children', text(node.delay_ms) end
      local order, results = {}, {}
      for k, child in ipairs(children) do
        order[#order + 1], order[#order + 2] = k, child[1]
        results[#results + 1], results[#results + 2] = child[1], kid_outcome_text(0, 'p', child[2], '')
      end
      call_chunked('ZADD', kids_key(node.id), order)
      call_chunked('HSET', kidres_key(node.id), results)
      redis.call('ZADD', waiting_children_key(), now, node.id)
      redis.call('SADD', parents_key(), node.id)
    end
    state, created = store_job(node.id, node, ARGV[i + 2], now, nil, unprioritised, flow)
    made = made + 1
    if state == 'waiting' and (node.priority ~= 0 or node.group) then leasable = leasable + 1 end
  end
  reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = state, token, created
end
if #unprioritised > 0 then
  call_chunked('LPUSH', WAIT, unprioritised)
  leasable = leasable + #unprioritised
end
-- Acks of this queue's jobs read their parent links from now on (include/ack.lua).
for _, node in ipairs(nodes) do
  if node.parent then
    redis.call('HSET', META, 'flows', '1')
    break
  end
end
wake_waiters(leasable)
count_history('enqueued', made)
return finish(reply, now)
