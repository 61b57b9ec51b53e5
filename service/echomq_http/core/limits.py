"""The limits of the API contract (openapi/openapi.json): ranges of every number and size a client sends."""

MAX_PRIORITY = 1000
MAX_ATTEMPTS = 1000
DEFAULT_MAX_ATTEMPTS = 3
MAX_DELAY_MS = 30 * 24 * 3600 * 1000  # 30 days
MAX_BACKOFF_DELAY_MS = 24 * 3600 * 1000
DEFAULT_BACKOFF_MS = 1000
MAX_EXPONENTIAL_BACKOFF_MS = 3600 * 1000

MIN_LEASE_MS = 1000
MAX_LEASE_MS = 12 * 3600 * 1000
DEFAULT_LEASE_MS = 30_000
MAX_JOBS_PER_LEASE = 100
MAX_WAIT_MS = 20_000

MIN_SESSION_TTL_MS = 1000  # a worker's session (POST .../workers/{worker}/heartbeat)
MAX_SESSION_TTL_MS = 300_000
DEFAULT_SESSION_TTL_MS = 30_000
MAX_SESSION_INFO_BYTES = 4096  # a session's info, as JSON text

MAX_BATCH = 1000  # jobs per enqueue-many, acks per ack-many, leases per heartbeat-many
MAX_ERROR_BYTES = 8 * 1024
MAX_PROGRESS_BYTES = 64 * 1024  # a heartbeat's progress, as JSON text
# A progress event carries the progress only up to this size (JSON text); a larger one is sent as
# "progress_truncated": true (the job view has it whole), so events stay small.
MAX_EVENT_PROGRESS_BYTES = 1024
MAX_CANCEL_REASON_BYTES = 1024
MAX_OUTCOME_WAIT_MS = 60_000  # GET .../jobs/{id}?wait_ms
DEFAULT_HISTORY_MINUTES = 60
MAX_HISTORY_MINUTES = 1440
MAX_JSON_DEPTH = 64  # nesting of payloads and results: deeper breaks many workers' JSON parsers
MAX_PAGE = 1000  # jobs per page of the failed list and of the job listing
MAX_GROUP_MAX_IN_FLIGHT = 10**9  # a group's own cap (PUT .../groups/{group}): any sane number
DEFAULT_PAGE = 100
MAX_LEDGER_PAGE = 10_000
DEFAULT_LEDGER_PAGE = 1000
MAX_OFFSET = 2**31
MAX_CURSOR_CHARS = 1024  # a job listing's cursor: its ids are names (at most 128 characters)

LEASE_ID_BYTES = 16  # 128 random bits
LEASE_ID_CHARS = LEASE_ID_BYTES * 2  # hex
# A worker name's owner record (keys.OWNER_SUFFIX) outlives the longest lease or session its
# token refreshed it for by this much: past the lease's end the sweep may still be reclaiming.
WORKER_OWNER_GRACE_MS = 10_000
TOKEN_ID_CHARS = 16  # a token's id, as an owner record keeps it: this much of its SHA-256, in hex
GENERATED_ID_BYTES = 12  # server-chosen job ids: 96 random bits, 24 hex characters

MAX_NAME_CHARS = 128
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"  # at most MAX_NAME_CHARS

# Queue settings (PUT /v1/queues/{queue}/settings). The contract gives the lower bounds; the upper
# ones keep every count exact in Lua, whose numbers are doubles (exact below 2^53): a rate log's
# sum of jobs, a ledger length compared with a cap, now + a retention in ms all stay far below.
MAX_IN_FLIGHT_CAP = 1_000_000_000  # max_in_flight, group_max_in_flight: more than a ledger can hold
MAX_RATE_JOBS = 1_000_000_000  # rate_limit.max
MIN_RATE_PER_MS = 1000
MAX_RATE_PER_MS = 24 * 3600 * 1000
MAX_STALLS = 1_000_000  # a job's stall count; more would take that many lease expiries
# A retention of up to 100 years: now + that, in ms, stays an exact integer in a Lua double.
MAX_RETENTION_S = 100 * 365 * 24 * 3600

# Schedules (PUT /v1/queues/{queue}/schedules/{schedule}). every_ms from 1 s (the contract) to a
# year; times up to the year 9999 (exact in a Lua double); a cron text of a sane length.
MIN_EVERY_MS = 1000
MAX_EVERY_MS = 366 * 24 * 3600 * 1000
MAX_EPOCH_MS = 253_402_300_799_999
MAX_CRON_CHARS = 256
MAX_SCHEDULE_LIMIT = 10**12  # runs; more than a schedule every second makes in 30,000 years
MAX_TIMEZONE_CHARS = 64
# Flows (POST /v1/flows): nodes in one tree, its levels (the root is level 1), and the random
# characters of a parent's kids_token (lua/include/children.lua).
MAX_FLOW_NODES = 1000
MAX_FLOW_DEPTH = 10
FLOW_TOKEN_BYTES = 8
# A flow's creation record older than this is taken for cut short, and the sweep makes the flow
# again (lua/flow_record.lua): well within the contract's minute, well past a creation's steps.
FLOW_REPLAY_AFTER_MS = 10_000
