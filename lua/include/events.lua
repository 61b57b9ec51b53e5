-- The queue's events: what a call did, written to its stream in one entry per call.
-- @include base
-- @include history

-- Events: what a call did, as lines "<type> <job id, or - for the queue> <JSON members>" (the
-- members of the event's data object after type, queue, id and at, which the service adds), all
-- of one call in one entry of the queue's stream EVENTS: an event is written in the same script
-- as its transition, and a batch costs one XADD. Events are numbered 1, 2, 3... per queue (META
-- "event_seq"); an entry's id is "0-<number of its last event>", so an entry holds the events
-- from the previous entry's number + 1 to its own. At least EVENTS_MAXLEN events are kept
-- (approximate trimming by MINID: whole stream nodes at a time); 0 turns events off, and so does
-- a queue's own setting (META "events_off") for that queue.
local EVENTS = PREFIX .. '@EVENTS_NAME@'
local EVENTS_MAXLEN = @EVENTS_MAXLEN@
-- META's events_off and event_seq, when the script read them with other fields of META (its
-- events are flushed in the same call, so nothing else changed them): a read fewer.
local events_meta = nil
local function note_events_meta(off, seq)
  events_meta = {off ~= false and off ~= nil, number_or(seq, 0)}
end

local event_lines = {}
local function emit(kind, id, members)
  if EVENTS_MAXLEN > 0 then event_lines[#event_lines + 1] = kind .. ' ' .. id .. ' ' .. members end
end

-- For the loops over a batch of jobs: whether this call's events are written (false when they
-- are off, or off for the queue as far as the script read META), and a line built whole by the
-- caller ("<type> <id> <members>", one concatenation per job rather than two).
local function events_on() return EVENTS_MAXLEN > 0 and not (events_meta and events_meta[1]) end
local function emit_line(line) event_lines[#event_lines + 1] = line end

-- The stream is trimmed (MINID) only by the entries that cross a multiple of EVENTS_TRIM_EVERY
-- events, not by every one: the trim is a third of an XADD's cost, and it keeps the stream at
-- most EVENTS_TRIM_EVERY events (and a stream node) longer than EVENTS_MAXLEN.
local EVENTS_TRIM_EVERY = math.max(1, math.min(256, math.floor(EVENTS_MAXLEN / 8)))
local function stream_entry_args(last, count, at)
  local id, data = '0-' .. text(last), table.concat(event_lines, '\n')
  if math.floor(last / EVENTS_TRIM_EVERY) == math.floor((last - count) / EVENTS_TRIM_EVERY) then
    return {'XADD', EVENTS, id, 'at', at, 'e', data}
  end
  return {'XADD', EVENTS, 'MINID', '~', '0-' .. text(math.max(last - EVENTS_MAXLEN + 1, 0)), id, 'at', at, 'e', data}
end

-- One stream entry for the events emitted so far (none: nothing written). at: the time (ms text).
-- Returns the number of the last event written (text, for META "event_seq"), or nil.
local function flush_events(at)
  local count = #event_lines
  if count == 0 then return end
  -- A queue whose settings turned its events off (META "events_off") writes none.
  if not events_meta then
    local meta = redis.call('HMGET', META, 'events_off', 'event_seq')
    note_events_meta(meta[1], meta[2])
  end
  if not events_meta[1] then
    local last = events_meta[2] + count
    local written = redis.pcall(unpack(stream_entry_args(last, count, at)))
    if type(written) == 'table' and written.err then
      -- The stream is ahead of the counter (META was deleted, the stream was not): go on from
      -- the stream's last id, so that event numbers never go back.
      local info = redis.call('XINFO', 'STREAM', EVENTS)
      for i = 1, #info, 2 do
        if info[i] == 'last-generated-id' then
          last = tonumber(string.match(info[i + 1], '%-(%d+)$')) + count
        end
      end
      redis.call(unpack(stream_entry_args(last, count, at)))
    end
    event_lines = {}
    return text(last)
  end
  event_lines = {}
end

-- Every script that emits events or counts history ends with this.
local function finish(reply, now)
  flush_meta(flush_events(text(now)))
  flush_history(now)
  return reply
end
