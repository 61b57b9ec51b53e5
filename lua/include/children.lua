-- A flow's child: what its final transition hands on to its parent (docs/FLOWS-DESIGN.md).
-- @include base

-- A parent's children and their outcomes (both in the parent's slot, deleted with it): KIDS,
-- "<queue> <id>" scored by the order they were added; KIDRES, the same members ->
-- "<seq>|<status>|<policy>|<detail>", status p (pending), c (completed), f (dead-lettered),
-- x (cancelled), d (deleted before it finished), policy fail or ignore, detail the result (raw
-- JSON) or the error handed to the parent. A job's own keys are the three of them.
local function kids_key(id) return PREFIX .. id .. '@KIDS_SUFFIX@' end
-- A KIDRES entry, written and read only by these two.
local function kid_outcome_text(seq, status, policy, detail)
  return seq .. '|' .. status .. '|' .. policy .. '|' .. detail
end
-- {seq, status, policy, detail} of an entry (a child not recorded: pending, its policy fail).
local function kid_outcome(entry)
  local seq, status, policy, detail = string.match(entry or '0|p|fail|', '^(%d+)|(%a)|(%a+)|(.*)$')
  return tonumber(seq), status, policy, detail
end
local function kidres_key(id) return PREFIX .. id .. '@KIDRES_SUFFIX@' end
local function job_keys(id) return job_key(id), kids_key(id), kidres_key(id) end
-- The queue's jobs that have KIDS and KIDRES keys (SET): the retention's deletions of many jobs at
-- once delete those keys too, found with one SMISMEMBER rather than two more keys per job.
local function parents_key() return PREFIX .. '@PARENTS_NAME@' end
-- Appends to keys the children's keys of the parents among ids (and takes them out of PARENTS).
local function add_parents_keys(keys, ids)
  if #ids == 0 or redis.call('EXISTS', parents_key()) == 0 then return end
  local found = {}
  for first = 1, #ids, CHUNK do
    local last = math.min(first + CHUNK - 1, #ids)
    local member = redis.call('SMISMEMBER', parents_key(), unpack(ids, first, last))
    for i = 1, #member do
      if member[i] == 1 then found[#found + 1] = ids[first + i - 1] end
    end
  end
  for _, id in ipairs(found) do
    keys[#keys + 1] = kids_key(id)
    keys[#keys + 1] = kidres_key(id)
  end
  call_chunked('SREM', parents_key(), found)
end

-- A child's hash holds its link, "parent" = "<parent's queue prefix> <parent id> <token>" (the
-- token is the parent's "kids_token": a later job with the parent's id has another), its policy
-- ("on_failure": ignore; absent: fail) and "outcome_seq", the number of its final transitions
-- (a redriven child finishes again), by which a parent tells a repeated delivery from a new one.
-- The deliveries a call makes are kept here until it ends (include/flows.lua finish_and_deliver).
local finished_children = {}
local function child_finished(key, id, link, policy, status, detail)
  local seq = redis.call('HINCRBY', key, 'outcome_seq', 1)
  local parent_prefix, parent_id, token = string.match(link, '^(%S+) (%S+) (%S+)$')
  finished_children[#finished_children + 1] = {
    parent_prefix, parent_id, token, QUEUE .. ' ' .. id, seq, status, policy or 'fail', detail,
  }
end
