-- The queue's history: per-minute counts of what happened.
-- @include base

-- Per-minute counts of what happened, kept 24 hours: HISTORY "<minute ms>:<kind>" for the kinds
-- enqueued, completed, failed (dead-lettered) and reclaimed. The first count of a minute deletes
-- the fields of the minutes that fell out of the 24 hours since the last first count ("last").
local HISTORY = PREFIX .. '@HISTORY_NAME@'
local HISTORY_KINDS = {'enqueued', 'completed', 'failed', 'reclaimed'}
local HISTORY_MINUTES = 1440
local history_counts = {}
local function count_history(kind, n)
  history_counts[kind] = (history_counts[kind] or 0) + n
end

local function flush_history(now)
  local minute = now - now % 60000
  local first_of_minute = false
  for kind, n in pairs(history_counts) do
    if n > 0 and redis.call('HINCRBY', HISTORY, text(minute) .. ':' .. kind, n) == n then first_of_minute = true end
  end
  history_counts = {}
  if not first_of_minute then return end
  local last = tonumber(redis.call('HGET', HISTORY, 'last') or (minute - 60000))
  if last >= minute then return end
  local stale = {}
  local from = math.max(last, minute - 2 * HISTORY_MINUTES * 60000) - HISTORY_MINUTES * 60000 + 60000
  for old = from, minute - HISTORY_MINUTES * 60000, 60000 do
    for _, kind in ipairs(HISTORY_KINDS) do stale[#stale + 1] = text(old) .. ':' .. kind end
  end
  call_chunked('HDEL', HISTORY, stale)
  redis.call('HSET', HISTORY, 'last', text(minute))
end
