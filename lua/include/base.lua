-- What every queue script builds on: the queue's KEYS and key prefix, the result codes, the
-- job hash's defaults, and small helpers (time, text, chunked commands, wake-ups).
-- The loader (service/echomq_http/store/scripts.py) inlines an include where a file says
-- "@include <name>", after the includes that one names in turn, each once, and fills in the
-- placeholders between at-signs (service/echomq_http/store/scripts.py).
-- Every queue script takes the same eleven KEYS, in the order of service.keys.QueueKeys.script_keys,
-- and ARGV[1] = the queue's key prefix "emq:{queue}:". Per-job and per-worker keys are derived
-- from that prefix, so they carry the same hash tag and live in the queue's cluster slot.
-- KEYS[11] is the due index the sweeper reads: one key on a single server, on a Cluster a key
-- of the queue's own slot (service.keys.due_index_key).

local META, WAIT, PRIO, DELAYED, ACTIVE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local DEADLINES, WORKERS, COMPLETED, FAILED, WAKE = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local DUE = KEYS[11]
local PREFIX = ARGV[1]
local QUEUE = string.sub(PREFIX, @QUEUE_NAME_START@, -3) -- "emq:{" name "}:"

-- Result codes: defined once, in service/echomq_http/core/errors.py ScriptCode.
local JOB_NOT_FOUND = @JOB_NOT_FOUND@
local LEASE_LOST = @LEASE_LOST@
local JOB_ACTIVE = @JOB_ACTIVE@
local NO_SESSION = @NO_SESSION@
local SCHEDULE_NOT_FOUND = @SCHEDULE_NOT_FOUND@
local SCHEDULE_MOVED = @SCHEDULE_MOVED@
local NOT_DELAYED = @NOT_DELAYED@
local WORKER_OWNED = @WORKER_OWNED@
local NEW_QUEUE = @NEW_QUEUE@
local JOB_EXISTS = @JOB_EXISTS@

-- A job's hash leaves out fields that hold their default (absent: name "", priority 0, attempt 0,
-- these max_attempts and backoff, updated_at = created_at): a queued job costs less memory.
local DEFAULT_MAX_ATTEMPTS = @DEFAULT_MAX_ATTEMPTS@
local DEFAULT_BACKOFF_MS = @DEFAULT_BACKOFF_MS@
local function number_or(value, default) return value and tonumber(value) or default end

-- Lua's unpack refuses more than about 8,000 values, and Redis does not roll back a script that
-- fails halfway: every variadic command over a list that can grow is sent in chunks of this many
-- values (even, so that score/member pairs are never split).
local CHUNK = 4000

-- Index entries that named no job in the state the index stands for (skipped, never acted on);
-- scripts that can meet one report this count (service.queue counts them in a metric).
local stale_entries = 0

-- A number passed to redis.call is turned into text with "%.14g" (a slow float format, a
-- good part of a batch's time in Redis): hot paths pass integers as text made once with "%d".
local function text(n) return string.format('%d', n) end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Another queue's KEYS, in this order, on a single server (its due index is the one key): what
-- a function passes to use_keys (store/luafunctions.py) to act on that queue once it has
-- finished with its own.
local function queue_keys(prefix) return {@SCRIPT_KEYS_OF_PREFIX@, '@DUE_INDEX@'} end

local function job_key(id) return PREFIX .. id .. '@JOB_SUFFIX@' end
local function lock_key(id) return PREFIX .. id .. '@LOCK_SUFFIX@' end

-- key: the command's first argument, or nil when the values are the keys (DEL).
local function call_chunked(command, key, values)
  for first = 1, #values, CHUNK do
    local last = math.min(first + CHUNK - 1, #values)
    if key then
      redis.call(command, key, unpack(values, first, last))
    else
      redis.call(command, unpack(values, first, last))
    end
  end
end

-- A JSON string (error texts; names and ids never need escaping: their pattern excludes it).
local function json_text(value)
  if value == nil or value == false then return 'null' end
  return cjson.encode(value)
end

-- META fields a call writes, written in one HSET at its end (finish, include/events.lua) with
-- the number of its last event: the fence of its leases, and delayed_due.
local fence_written, delayed_due_written = nil, nil

-- META "delayed_due": no job in DELAYED is due before this time (ms); "" when DELAYED is empty;
-- absent when not known. A lease looks in DELAYED only once something may be due (include/
-- lease.lua); a call that delays a job lowers it (note_delayed), one read at the call's end.
local delayed_min = nil
local function note_delayed(run_at)
  if not delayed_min or run_at < delayed_min then delayed_min = run_at end
end

-- event_seq: the number of the call's last event (text), nil when it wrote none.
local function flush_meta(event_seq)
  if delayed_min then
    local known = redis.call('HGET', META, 'delayed_due')
    if known and (known == '' or tonumber(known) > delayed_min) then delayed_due_written = text(delayed_min) end
    delayed_min = nil
  end
  if not (fence_written or delayed_due_written) then
    if event_seq then redis.call('HSET', META, 'event_seq', event_seq) end
    return
  end
  local fields, n = {}, 0
  if event_seq then fields[1], fields[2], n = 'event_seq', event_seq, 2 end
  if fence_written then fields[n + 1], fields[n + 2], n = 'fence', fence_written, n + 2 end
  if delayed_due_written then fields[n + 1], fields[n + 2], n = 'delayed_due', delayed_due_written, n + 2 end
  redis.call('HSET', META, unpack(fields, 1, n))
  fence_written, delayed_due_written = nil, nil
end

local function wake_waiters(count)
  -- PUBLISH, or SPUBLISH on a Cluster (the channel is KEYS[10], so it shares the queue's slot)
  if count > 0 then redis.call('@PUBLISH@', WAKE, count) end
end
