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

MAX_BATCH = 1000  # jobs per enqueue-many, acks per ack-many, leases per heartbeat-many
MAX_ERROR_BYTES = 8 * 1024
MAX_PROGRESS_BYTES = 64 * 1024  # a heartbeat's progress, as JSON text
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
GENERATED_ID_BYTES = 12  # server-chosen job ids: 96 random bits, 24 hex characters

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
