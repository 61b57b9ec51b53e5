-- A flow's parent: what a finished child's outcome does to it, and how it reaches it
-- (docs/FLOWS-DESIGN.md).
-- @include base
-- @include events
-- @include due_index
-- @include waiting
-- @include retention
-- @include children

-- The queue's jobs waiting for their children, by when they began to.
local function waiting_children_key() return PREFIX .. '@WAITING_CHILDREN_NAME@' end
-- The queue's finished children whose parents this call could not reach (another slot, or a
-- call by EVAL: store/luafunctions.py), one entry each, delivered by the sweep (deliver.lua).
-- (Keys made by a function when used, not by every call of every script that finishes jobs.)
local function outbox_key() return PREFIX .. '@OUTBOX_NAME@' end
-- Flows being made, root id -> when (ms), and each one's request (lua/flow_record.lua).
local function flows_key() return PREFIX .. '@FLOWS_NAME@' end
local function flow_record_key(id) return PREFIX .. id .. '@FLOW_SUFFIX@' end
local FIELD_SEPARATOR = '\n' -- an outbox entry's fields; never in a prefix, id, token or status

-- The count field of the parent's hash a child's status and policy count in.
local function kid_count(status, policy)
  if status == 'p' then return 'kids_pending' end
  if status == 'c' then return 'kids_completed' end
  if policy == 'ignore' then return 'kids_ignored' end
  return 'kids_failed'
end

local function error_of(status, detail)
  if status == 'd' then return 'deleted' end
  return detail ~= '' and detail or (status == 'x' and 'cancelled' or 'failed')
end

-- One delivery (as child_finished made it) to its parent, on the parent's queue (the caller bound
-- it). Idempotent: a delivery whose seq is not above the one recorded for the child changes
-- nothing. Only a waiting_children parent moves: failed at a fail-policy failure (its error
-- "child_failed: <queue>/<id>: <error>"), else waiting (or delayed by its after_children ms)
-- once no child is pending. Emits children_completed, or failed with reason child_failed.
local function deliver(delivery, now)
  local id, token, ref, seq, status, detail = delivery[2], delivery[3], delivery[4], delivery[5], delivery[6],
    delivery[8]
  local key = job_key(id)
  local parent = redis.call('HMGET', key, 'state', 'kids_token', 'kids_pending', 'attempt', 'after_children',
    'priority', 'group')
  if parent[2] ~= token then return end -- deleted, or a later job with its id
  local results = kidres_key(id)
  local recorded = redis.call('HGET', results, ref)
  if not recorded then return end
  local recorded_seq, recorded_status, policy = kid_outcome(recorded)
  if recorded_seq >= seq then return end -- a repeat
  redis.call('HSET', results, ref, kid_outcome_text(seq, status, policy, detail))
  local from, to = kid_count(recorded_status, policy), kid_count(status, policy)
  local pending = number_or(parent[3], 0)
  if from ~= to then
    redis.call('HINCRBY', key, from, -1)
    redis.call('HINCRBY', key, to, 1)
    if from == 'kids_pending' then pending = pending - 1 end
    if to == 'kids_pending' then pending = pending + 1 end
  end
  if parent[1] ~= 'waiting_children' then return end
  local now_text = text(now)
  if to == 'kids_failed' then
    redis.call('ZREM', waiting_children_key(), id)
    local child_queue, child_id = string.match(ref, '^(%S+) (%S+)$')
    local error_text = 'child_failed: ' .. child_queue .. '/' .. child_id .. ': ' .. error_of(status, detail)
    -- Marked: its redrive must wait for its children again, which redrive.lua does not do yet.
    redis.call('HSET', key, 'error', error_text, 'failed_by_child', '1')
    dead_letter(id, key, now, number_or(parent[4], 0), 'child_failed', error_text)
  elseif pending == 0 then
    redis.call('ZREM', waiting_children_key(), id)
    emit('children_completed', id, '')
    local delay_ms = number_or(parent[5], 0)
    if delay_ms > 0 then
      local run_at = now + delay_ms
      redis.call('HSET', key, 'state', 'delayed', 'run_at', text(run_at), 'updated_at', now_text)
      redis.call('ZADD', DELAYED, run_at, id)
      note_delayed(run_at)
      sweep_needed_by(run_at)
    else
      delayed_to_waiting(id, key, {nil, parent[6], parent[7]}, now_text)
      wake_waiters(1)
    end
  end
end

local function outbox_entry(delivery)
  return table.concat({delivery[1], delivery[2], delivery[3], delivery[4], text(delivery[5]), delivery[6],
    delivery[7], delivery[8]}, FIELD_SEPARATOR)
end

-- An outbox entry back into a delivery.
local function delivery_of(entry)
  local fields, start = {}, 1
  for _ = 1, 7 do
    local stop = string.find(entry, FIELD_SEPARATOR, start, true)
    fields[#fields + 1] = string.sub(entry, start, stop - 1)
    start = stop + 1
  end
  fields[8] = string.sub(entry, start)
  fields[5] = tonumber(fields[5])
  return fields
end

-- What every script that can finish a job ends with instead of finish (include/events.lua): the
-- call's own queue is finished first; then each child it finished is delivered to its parent,
-- in this call when the parent's queue can be reached (the same queue, or any on a single
-- server where the call is a function: use_keys binds the helpers to the parent's queue, which
-- is then finished in turn), else through this queue's OUTBOX. A parent that fails by a child
-- is a child finishing in turn: delivered next, up the tree. Returns reply.
local function finish_and_deliver(reply, now)
  finish(reply, now)
  if #finished_children == 0 then return reply end
  local work, next_one, home = finished_children, 1, PREFIX
  finished_children = {}
  while next_one <= #work do
    local delivery = work[next_one]
    next_one = next_one + 1
    if delivery[1] == PREFIX then
      deliver(delivery, now)
    elseif use_keys then
      use_keys(queue_keys(delivery[1]), {delivery[1]})
      deliver(delivery, now)
    else
      redis.call('RPUSH', outbox_key(), outbox_entry(delivery))
      sweep_needed_by(now)
    end
    finish(nil, now)
    for _, more in ipairs(finished_children) do work[#work + 1] = more end
    finished_children = {}
  end
  if PREFIX ~= home then use_keys(queue_keys(home), {home}) end
  return reply
end
