-- Read a page of the ids of the jobs in one state, in that state's order, from where the previous
-- page stopped (its cursor), with each job's payload size. The hashes themselves are read by the
-- caller in chunks bounded by those sizes (service/echomq_http/store/chunked_read.py), as for failed-page.
-- Orders: waiting as leases take them from PRIO and WAIT (PRIO lowest score first, then WAIT from
-- its right end), then the grouped waiting jobs (leased round-robin across groups, which no
-- listing order can follow): group after group by name (GROUPS), each group by (score, id),
-- delayed by due time, active oldest lease first (ACTIVE from its right end, which is by fence),
-- completed, failed and cancelled most recently finished first, waiting_children oldest first
-- (by when they began to wait).
-- Following the cursors visits every job that stays in the state during the paging exactly
-- once (a job that moves in or out meanwhile may or may not be listed), as each cursor says
-- where the next page starts in terms that the queue's other transitions keep true:
--   "z" (a sorted set: DELAYED, COMPLETED, FAILED, CANCELLED, WAITING_CHILDREN, or PRIO for waiting): the last
--       entry read, (score, id): the next page starts strictly after it in the set's order
--       (equal scores go by the ids' bytes), found by counting, whether it is still there or not.
--       A job keeps its score while it stays in its state.
--   "w" (WAIT, after PRIO): L the last entry read ("" for none), N the entry after it (the next
--       page's first), N's index from the right end, the queue's fence (META) and the time of the
--       page. Entries keep their order in WAIT and leave it only from the right end (leases):
--       new jobs come in at the left, releases at the right, and a job deleted or cancelled
--       leaves its tombstone ":<id>" in its place (include/waiting.lua bury_waiting). So the next page
--       starts at N (or its tombstone) if it is still there, else just after L (or its
--       tombstone); at the right end if N or L was leased since (a lease pops every entry to
--       its right first). The search for them reaches exactly as far as they can have moved:
--       their index plus the pushes to the right end since (META "front_pushes", in the
--       cursor too).
--   "g" (a group's line, after PRIO and WAIT): the group, and the last entry read in it (score,
--       id; "" and "" for none yet): the next page starts strictly after it in that group, or
--       in the first group after it by name when the group is gone.
--   "a" (ACTIVE): the fence of the last job listed: the next page starts at the first entry
--       whose fence is greater, found by binary search (a lease LPUSHes with a greater fence, so
--       from the right the ledger goes by fence; an active job keeps its fence).
-- Each call reads at most limit + SCAN_SLACK entries, so a page may hold fewer than limit jobs
-- (entries whose job is not in the state are passed over) and still have a next cursor.
-- KEYS[1..11] the queue's keys (see include/base.lua); reads only: the state's keys (and META's
--             fence for waiting), the jobs' hashes, PREFIX .. "@CANCELLED_NAME@", and for waiting
--             GROUPS and the groups' lines
-- ARGV[1]     key prefix "emq:{queue}:"
-- ARGV[2]     state: waiting, delayed, active, completed, failed, cancelled or waiting_children
-- ARGV[3]     limit (1..1000)
-- ARGV[4]     the previous page's cursor kind: "" (the first page), "z", "w" or "a", its fields
--             in ARGV[5..]: z: score, id; w: L, N, N's index, fence, time (ms), front
--             pushes; g: group, score, id; a: fence
-- Returns     {{id, payload_bytes, ...}, cursor}: cursor {} on the last page, else one of
--             {"z", score, id}, {"w", L, N, index, fence, time, front pushes}, {"g", group, score,
--             id}, {"a", fence}
-- @include base
-- @include retention
-- @include groups
-- @include waiting
-- @include flows
local SCAN_SLACK = 1000 -- entries passed over per call at most, beyond the page
local ZSETS = {delayed = DELAYED, completed = COMPLETED, failed = FAILED, cancelled = CANCELLED,
  waiting_children = waiting_children_key()}
local DESCENDING = {completed = true, failed = true, cancelled = true}

local state, limit, kind = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local budget = limit + SCAN_SLACK
local listed, count = {}, 0

local function job_state(id) return redis.call('HGET', job_key(id), 'state') end

-- Whether the page takes another entry: false once it is full or the budget is spent (the
-- entry is then the next page's). Counts the entry against the budget.
local function room()
  if count == limit or budget == 0 then return false end
  budget = budget - 1
  return true
end

local function list(id)
  listed[#listed + 1] = id
  listed[#listed + 1] = redis.call('HSTRLEN', job_key(id), 'payload')
  count = count + 1
end

-- Whether a comes after b in a sorted set's order among equal scores: by bytes, like Redis.
-- (Lua's < on strings follows the locale's collation.) Ids are at most 128 bytes.
local function follows(a, b, descending)
  if a == b then return false end
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return (x > y) ~= descending end
  end
  return (#a > #b) ~= descending
end

-- The rank (in the listing's order) of the first entry strictly after (score, id): the entries
-- with better scores, then a binary search of the block of equal scores, which is in id order.
local function zset_start(key, descending, score, id)
  local before
  if descending then
    before = redis.call('ZCOUNT', key, '(' .. score, '+inf')
  else
    before = redis.call('ZCOUNT', key, '-inf', '(' .. score)
  end
  local lo, hi = 0, redis.call('ZCOUNT', key, score, score)
  local range = descending and 'ZREVRANGE' or 'ZRANGE'
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if follows(redis.call(range, key, before + mid, before + mid)[1], id, descending) then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return before + lo
end

-- Lists the set's jobs in the state from rank `start` on. Returns the cursor where the page
-- stopped, or nil when the set ended.
local function scan_zset(key, descending, start)
  local range = descending and 'ZREVRANGE' or 'ZRANGE'
  local last
  while true do
    local want = math.min(limit - count, budget) + 1 -- one more: whether the page is the last
    local window = redis.call(range, key, start, start + want - 1, 'WITHSCORES')
    for i = 1, #window, 2 do
      if not room() then return last end
      if job_state(window[i]) == state then list(window[i]) end
      last = {'z', window[i + 1], window[i]}
    end
    if #window < 2 * want then return nil end
    start = start + want
  end
end

-- Lists WAIT's jobs from the index `start` (from the right) on; `last`: the entry read before
-- it ("" for none). Returns the cursor where the page stopped, or nil when WAIT ended.
local function scan_wait(start, last)
  while true do
    local want = math.min(limit - count, budget) + 1
    local window = redis.call('LRANGE', WAIT, -(start + want), -(start + 1))
    local n = #window
    for k = n, 1, -1 do -- window[n] is the entry at `start`
      local id = window[k]
      if not room() then
        local meta = redis.call('HMGET', META, 'fence', 'front_pushes')
        return {'w', last, id, start + n - k, meta[1] or '0', now_ms(), meta[2] or '0'}
      end
      if job_state(id) == 'waiting' then list(id) end
      last = id
    end
    if n < want then return nil end
    start = start + n
  end
end

-- Where a cursor's WAIT entry is now: "here" and its index from the right, or "leased" (taken
-- from the right since the page, and every entry to its right with it), or "gone" (not within
-- the search). A job deleted or cancelled since left its tombstone in its place (include/waiting.lua
-- bury_waiting), so it is found there; a tombstone itself can be an anchor too.
local function wait_anchor(id, fence, page_ms, search)
  if id == '' then return 'gone' end
  local function find(entry)
    -- Searched from the right, at most as far as it was plus the releases a page may have seen.
    local at = redis.call('LPOS', WAIT, entry, 'RANK', -1, 'MAXLEN', search)
    return at and redis.call('LLEN', WAIT) - 1 - at
  end
  local at
  if string.sub(id, 1, 1) == WAIT_TOMBSTONE then
    at = find(id)
    if at then return 'here', at end
    return 'leased' -- a tombstone no longer there was popped by a lease, with all to its right
  end
  local job = redis.call('HMGET', job_key(id), 'state', 'created_at', 'fence')
  local same = job[2] and tonumber(job[2]) <= page_ms -- not a job enqueued again since
  if same and job[3] and tonumber(job[3]) > fence then return 'leased' end
  at = same and find(id) or find(WAIT_TOMBSTONE .. id)
  if at then return 'here', at end
  -- Deleted or cancelled since, and its tombstone popped by a lease meanwhile.
  if not same or job[1] == 'cancelled' then return 'leased' end
  return 'gone'
end

local function wait_start(last, next_id, index, fence, page_ms, front_pushes)
  -- An anchor is at most as far from the right end as it was, plus the entries pushed there
  -- since (releases and reclaims: META "front_pushes"), so the search reaches it for sure.
  local pushed = tonumber(redis.call('HGET', META, 'front_pushes') or '0') - front_pushes
  local search = index + 2 + math.max(pushed, 0)
  local where, at = wait_anchor(next_id, fence, page_ms, search)
  if where == 'here' then return at, last end
  if where == 'leased' then return 0, '' end
  where, at = wait_anchor(last, fence, page_ms, search)
  if where == 'here' then return at + 1, last end
  if where == 'leased' then return 0, '' end
  -- Neither found (an index entry changed behind the scripts' back): where the entry after them
  -- is had only leases moved it since.
  local leased = tonumber(redis.call('HGET', META, 'fence') or '0') - fence
  return math.max(0, index - 1 - leased), ''
end

-- Lists the groups' waiting jobs, group after group by name, from the group `from` ("" for the
-- first) on, strictly after (score, id) in it ("" for from its start). Each group read counts
-- against the budget like an entry. Returns the cursor where the page stopped, or nil.
local function scan_groups(from, score, id)
  local range_start = from == '' and '-' or '[' .. from
  while true do
    local names = redis.call('ZRANGEBYLEX', groups().GROUPS, range_start, '+', 'LIMIT', 0, budget + 1)
    if #names == 0 then return nil end
    for _, group in ipairs(names) do
      local at_score, at_id = '', ''
      if group == from then at_score, at_id = score, id end
      -- At least one more entry must fit, or the page would end without a place in this group.
      if count == limit or budget < 2 then return {'g', group, at_score, at_id} end
      budget = budget - 1
      local key = groups().wait_key(group)
      local cursor = scan_zset(key, false, at_score ~= '' and zset_start(key, false, at_score, at_id) or 0)
      if cursor then return {'g', group, cursor[2], cursor[3]} end
      range_start = '(' .. group
    end
  end
end

-- A ledger entry's fence, by its index from the right; nil when its hash has none.
local function fence_at(index)
  local id = redis.call('LINDEX', ACTIVE, -(index + 1))
  if not id then return nil end
  return tonumber(redis.call('HGET', job_key(id), 'fence'))
end

-- Lists the active jobs leased after `after` (a fence), oldest lease first.
local function scan_active(after)
  -- The first index with a greater fence. An entry without one (a stale entry) counts as
  -- greater: the start can only come out early, and the scan below skips what it passes.
  local lo, hi = 0, redis.call('LLEN', ACTIVE)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local fence = fence_at(mid)
    if fence == nil or fence > after then hi = mid else lo = mid + 1 end
  end
  local start, last = lo, after
  while true do
    local want = math.min(limit - count, budget) + 1
    local window = redis.call('LRANGE', ACTIVE, -(start + want), -(start + 1))
    local n = #window
    for k = n, 1, -1 do
      if not room() then return {'a', last} end
      local job = redis.call('HMGET', job_key(window[k]), 'state', 'fence')
      local fence = tonumber(job[2])
      if job[1] == 'active' and fence and fence > last then
        list(window[k])
        last = fence
      end
    end
    if n < want then return nil end
    start = start + n
  end
end

local cursor
if state == 'active' then
  cursor = scan_active(kind == 'a' and tonumber(ARGV[5]) or 0)
elseif state == 'waiting' then
  if kind == 'w' then
    local start, last = wait_start(ARGV[5], ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]),
      tonumber(ARGV[10]))
    cursor = scan_wait(start, last) or scan_groups('', '', '')
  elseif kind == 'g' then
    cursor = scan_groups(ARGV[5], ARGV[6], ARGV[7])
  else
    cursor = scan_zset(PRIO, false, kind == 'z' and zset_start(PRIO, false, ARGV[5], ARGV[6]) or 0)
    if not cursor then cursor = scan_wait(0, '') or scan_groups('', '', '') end
  end
else
  local key, descending = ZSETS[state], DESCENDING[state] or false
  cursor = scan_zset(key, descending, kind == 'z' and zset_start(key, descending, ARGV[5], ARGV[6]) or 0)
end
return {listed, cursor or {}}
