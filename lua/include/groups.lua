-- The queue's groups of jobs: each group's line, its count of jobs in flight and cap, and RING.
-- @include base

-- Groups. A grouped job waits in its group's ZSET (group_wait_key: scored like PRIO, so by
-- priority, then handed-back jobs first, then first in first out); its group's HASH (group_key)
-- counts its jobs in the ledger ("active"), holds the group's own cap ("max"; else META
-- "group_max_in_flight" applies; none: no cap) and says whether it is in RING ("ring").
-- RING is the LIST leases take turns from, one job per turn: a member is popped from the right
-- and pushed back on the left while it has waiting jobs and room. Its members are the groups
-- with waiting jobs and room, and UNGROUPED, which stands for the jobs without a group (WAIT and
-- PRIO: a group of their own, without a cap) from the queue's first group on (META "grouped";
-- until then leases take from WAIT and PRIO as they always did). A group at its cap is out of
-- RING, so it costs a lease nothing, until one of its jobs leaves the ledger (detach) and puts
-- it back. META "group_waiting" counts the grouped waiting jobs; GROUPS indexes the groups by
-- name (all scores 0): every group with waiting or active jobs or a cap of its own (a group with
-- none of these is forgotten). PARKED (by name too) holds the groups that were kept out of RING
-- by their cap while jobs of theirs were waiting, so that a change of the queue's
-- group_max_in_flight reaches them (include/lease.lua ring_helpers, unpark); an entry of a group that
-- is back in RING is dropped by the next such pass.
-- The helpers are made on first use (groups()), not as top-level functions: a script run by EVAL
-- (on a Cluster, with confirmed writes, on Redis 6.2) makes a closure per call for every top-level
-- function it keeps, and a queue without groups must not pay for a dozen of them. As a function
-- library (FCALL) a call pays for the table only when it uses groups.
local function group_helpers()
  local g = {
    RING = PREFIX .. '@RING_NAME@',
    GROUPS = PREFIX .. '@GROUPS_NAME@',
    PARKED = PREFIX .. '@PARKED_NAME@',
    UNGROUPED = ':', -- never a group's name (names have no ':')
  }
  function g.wait_key(group) return PREFIX .. group .. '@GROUP_WAIT_SUFFIX@' end
  function g.key(group) return PREFIX .. group .. '@GROUP_SUFFIX@' end

  -- The queue's group_max_in_flight (math.huge: none), read at most once per call (the lease
  -- sets it from its own read of META).
  function g.cap(own_max)
    if own_max then return tonumber(own_max) end
    if g.queue_cap == nil then
      g.queue_cap = tonumber(redis.call('HGET', META, 'group_max_in_flight') or '') or math.huge
    end
    return g.queue_cap
  end

  -- A group's hash fields {active, max, ring}.
  function g.fields(group) return redis.call('HMGET', g.key(group), 'active', 'max', 'ring') end

  -- A group seen for the first time: indexed; the queue's first group also starts RING, with
  -- the ungrouped jobs' member in it.
  function g.new(group)
    redis.call('ZADD', g.GROUPS, 0, group)
    if redis.call('HSETNX', META, 'grouped', 1) == 1 then redis.call('RPUSH', g.RING, g.UNGROUPED) end
  end

  -- Puts a group into RING when it is out of it and has waiting jobs and room. fields: its
  -- hash's {active, max, ring}; waiting: its waiting jobs. Returns 1 when it went in, else 0.
  function g.ring(group, fields, waiting)
    if fields[3] or waiting == 0 or number_or(fields[1], 0) >= g.cap(fields[2]) then return 0 end
    redis.call('LPUSH', g.RING, group)
    redis.call('HSET', g.key(group), 'ring', 1)
    fields[3] = '1'
    return 1
  end

  -- Forgets a group with nothing waiting, nothing in the ledger, no cap of its own, out of RING.
  function g.forget_if_idle(group, fields, waiting)
    if waiting == 0 and number_or(fields[1], 0) <= 0 and not fields[2] and not fields[3] then
      redis.call('DEL', g.key(group))
      redis.call('ZREM', g.GROUPS, group)
      redis.call('ZREM', g.PARKED, group)
    end
  end

  -- A grouped job joins its group's line (score: its place, as in PRIO).
  function g.push(id, score, group)
    if redis.call('ZADD', g.wait_key(group), score, id) == 1 then
      redis.call('HINCRBY', META, 'group_waiting', 1)
    end
    local fields = g.fields(group)
    if not (fields[1] or fields[2] or fields[3]) then g.new(group) end
    if g.ring(group, fields, 1) == 0 and not fields[3] then redis.call('ZADD', g.PARKED, 0, group) end
  end

  -- A waiting job of a group leaves its line (cancelled, deleted). A group left empty in RING
  -- stays there until a lease meets it (taking it out of RING would be an LREM over RING).
  function g.unqueue(id, group)
    if redis.call('ZREM', g.wait_key(group), id) == 0 then return end
    redis.call('HINCRBY', META, 'group_waiting', -1)
    g.forget_if_idle(group, g.fields(group), redis.call('ZCARD', g.wait_key(group)))
  end

  -- Jobs left the ledger (departures.by_group: how many of each group): their groups have room
  -- again, and each that has waiting jobs goes back into RING; long polls are woken for them.
  function g.free(departures)
    local ringed = 0
    for _, group in ipairs(departures.groups) do
      local key = g.key(group)
      if redis.call('HINCRBY', key, 'active', -departures.by_group[group]) < 0 then
        redis.call('HSET', key, 'active', 0)
      end
      local fields = g.fields(group)
      local waiting = redis.call('ZCARD', g.wait_key(group))
      ringed = ringed + g.ring(group, fields, waiting)
      g.forget_if_idle(group, fields, waiting)
    end
    wake_waiters(ringed)
  end
  return g
end

local group_helpers_made = nil
local function groups()
  if not group_helpers_made then group_helpers_made = group_helpers() end
  return group_helpers_made
end
