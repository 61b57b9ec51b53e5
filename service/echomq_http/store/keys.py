"""Every Redis key and channel name EchoMQ uses: the only module that spells one.

A queue's keys all start with ``emq:{<queue>}:`` so that Redis Cluster puts them in one
slot (the braces are the hash tag). Queue-level keys have one segment after that prefix
(``emq:{q}:wait``); per-job and per-worker keys have two (``emq:{q}:<id>:lock``). Names
never contain ``:``, so no job or worker key can ever equal a queue-level key, and the
distinct suffixes keep job and worker keys apart. Scripts derive per-job keys from the
prefix with the same suffixes (``JOB_SUFFIX``, ``LOCK_SUFFIX``, ``HELD_SUFFIX``,
``SESSION_SUFFIX``, ``OWNER_SUFFIX``, ``REQUEST_SUFFIX``, ``SCHEDULE_SUFFIX``), which the script
loader fills in instead of spelling them again in Lua.

The due index (a ZSET of queue names by the time their next sweep has work to do) is written by
the scripts, so on a Cluster it must share each queue's slot: there it is one key per slot,
``emq:due:{<tag>}`` with a tag that hashes to that slot; on a single server it is one key.
"""

from __future__ import annotations

import binascii
import itertools
import string
from dataclasses import dataclass
from functools import lru_cache

KEY_ROOT = "emq"
QUEUE_REGISTRY = f"{KEY_ROOT}:queues"  # SET of queue names; global, so never touched by scripts

JOB_SUFFIX = ":job"  # HASH: one job's fields
LOCK_SUFFIX = ":lock"  # STRING "<lease_id>:<worker>" with a PX TTL: the lease
HELD_SUFFIX = ":held"  # ZSET: id -> fence of the jobs a worker holds (so: by lease)
# HASH: a worker's session on the queue: state ("running"|"quiet"), started_at, last_seen_at,
# expires_at, ttl_ms, info (JSON object text); lapsed_fence while a lapse is being swept
SESSION_SUFFIX = ":session"
# STRING "<token id>" with a PX TTL: the token a worker name belongs to while it may hold leases
# or a session it made (lua/include/workers.lua claim_worker; docs/security.md)
OWNER_SUFFIX = ":owner"
# STRING "<id> <lease_id> ..." with a PX TTL: what one lease request leased, under
# "<worker>:<request_id>:req" (three segments: never a job's or a worker's key)
REQUEST_SUFFIX = ":req"
# Per-group keys, "<group>:gwait" and "<group>:group" (groups are names: never a queue-level key,
# and the suffixes keep them apart from job and worker keys):
GROUP_WAIT_SUFFIX = ":gwait"  # ZSET: a group's waiting jobs, scored like PRIO (priority, then line)
GROUP_SUFFIX = ":group"  # HASH: active (its jobs in the ledger), max (its cap), ring ("1": in RING)
# Queue-level keys the scripts derive from the prefix rather than take as KEYS (every script takes
# the same eleven; these are written by a few and read back by the service):
EVENTS_NAME = "events"  # STREAM: the queue's events, entry id "0-<number of its last event>"
HISTORY_NAME = "history"  # HASH: "<minute ms>:<kind>" -> count, the last 24 h (lua/include/history.lua)
CANCELLED_NAME = "cancelled"  # ZSET: id -> cancellation time (ms), for retention
# LIST of "<time ms> <jobs>" entries, newest on the left: the leases counted against the queue's
# rate limit (lua/include/lease.lua); META "rate_used" holds the sum of its entries' jobs
RATE_NAME = "rate"
SESSIONS_NAME = "sessions"  # ZSET: worker -> when its session lapses (ms), or now while a lapse is due
# Groups (lua/include/groups.lua): RING is the LIST of the members leases take turns from (the
# groups with waiting jobs and room, and the ungrouped jobs as one member ":"); GROUPS the ZSET
# (all scores 0, so by name) of every group with waiting or active jobs or a cap of its own.
RING_NAME = "ring"
GROUPS_NAME = "groups"
PARKED_NAME = "parked"  # ZSET (scores 0): groups that left RING at their cap with jobs waiting
# Schedules (lua/include/schedule.lua): "<schedule>:sched" is a schedule's HASH (its spec, the job
# it makes, next_run_at, runs ...); SCHEDULES the ZSET (scores 0, so by name) of every schedule of
# the queue; TIMETABLE the ZSET of the schedules that have a next run (not paused, not ended) by
# that run's time (ms), which the sweep reads and the due index follows.
# Flows (docs/FLOWS-DESIGN.md): a parent's children, "<queue> <id>" scored by the order they were
# added (ZSET), and what each handed it, "<seq>|<status>|<policy>|<result or error>" (HASH); the
# queue's jobs waiting for their children by when they began to (ZSET); and its finished
# children whose parents could not be told in the same call (LIST, delivered by the sweep).
KIDS_SUFFIX = ":kids"
KIDRES_SUFFIX = ":kidres"
WAITING_CHILDREN_NAME = "waiting_children"
OUTBOX_NAME = "outbox"
PARENTS_NAME = "parents"  # SET: the queue's jobs that have KIDS and KIDRES keys
# Flows being made whose root is in this queue (lua/flow_record.lua): root id -> when (ms) (ZSET),
# and each one's request, its ids filled in, under "<root id>:flow" (STRING)
FLOWS_NAME = "flows"
FLOW_SUFFIX = ":flow"
SCHEDULE_SUFFIX = ":sched"
SCHEDULES_NAME = "schedules"
TIMETABLE_NAME = "timetable"
DUE_INDEX = f"{KEY_ROOT}:due"  # ZSET: queue -> when its next sweep has work (ms)
DUE_INDEX_FILLED = f"{KEY_ROOT}:due-filled"  # STRING: every registered queue was put in the index
# The dashboard's sign-in (echomq_http.ui.sessions): no queue's, so no hash tag (any slot), and
# no brace, so never a queue's key.
# STRING with an EX TTL, under the SHA-256 (hex) of a session id: the digest (hex) of the token
# the session signed in with
UI_SESSION_PREFIX = f"{KEY_ROOT}:ui-session:"
# STRING counter with an EX TTL, under "<client address>:<window number>": failed sign-ins
SIGN_IN_FAILURES_PREFIX = f"{KEY_ROOT}:ui-sign-in-failures:"
CLUSTER_SLOTS = 16384
_TAG_ALPHABET = string.digits + string.ascii_lowercase


def queue_prefix(queue: str) -> str:
    return f"{KEY_ROOT}:{{{queue}}}:"


def queue_of_prefix(prefix: str) -> str:
    """The queue whose key prefix this is (queue_prefix's inverse)."""
    return prefix[len(KEY_ROOT) + 2 : -2]


# The names of a queue's script keys after its prefix, in lua/include/base.lua's KEYS order
# (the due index, the last of them, is not under the prefix: due_index_key).
SCRIPT_KEY_NAMES = ("meta", "wait", "prio", "delayed", "active", "deadlines", "workers")
SCRIPT_KEY_NAMES += ("completed", "failed", "wake")


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one queue. Built once per queue name and cached by the caller."""

    queue: str
    prefix: str
    meta: str  # HASH: paused flag and the counters for ids and priority order
    wait: str  # LIST: priority-0 waiting jobs; new ones LPUSHed, leased from the right
    prio: str  # ZSET: waiting jobs with priority > 0, lowest score leased first
    delayed: str  # ZSET: id -> due time (ms)
    active: str  # LIST: the in-flight ledger; newest lease on the left, oldest on the right
    deadlines: str  # ZSET: id -> lease expiry (ms); the sweep's index into the ledger
    workers: str  # SET: workers holding at least one job
    completed: str  # ZSET: id -> completion time (ms), for retention
    failed: str  # ZSET: id -> failure time (ms): the dead letters
    wake: str  # pub/sub channel: "<n>" jobs became leasable
    due: str  # the due index this queue is in (due_index_key)
    script_keys: tuple[str, ...]  # the KEYS every script takes, in lua/include/base.lua's order
    events: str
    history: str
    cancelled: str  # ZSET: id -> cancellation time (ms); not a script key (Lua derives it)
    rate: str  # LIST: the rate limit's log (RATE_NAME); not a script key (Lua derives it)
    sessions: str  # ZSET: worker -> session expiry (ms); not a script key (Lua derives it)
    ring: str  # LIST: group names leases take turns from; not a script key (Lua derives it)
    groups: str  # ZSET: the queue's groups by name; not a script key (Lua derives it)
    parked: str  # ZSET: groups out of RING at their cap; not a script key (Lua derives it)
    schedules: str  # ZSET: the queue's schedules by name; not a script key (Lua derives it)
    timetable: str  # ZSET: schedule -> its next run (ms); not a script key (Lua derives it)
    outbox: str  # LIST: finished children's outcomes for parents out of reach (Lua derives it)
    flows: str  # ZSET: flows being made, by root id (Lua derives it)

    @classmethod
    def for_queue(cls, queue: str, cluster: bool = False) -> QueueKeys:
        prefix = queue_prefix(queue)
        named = {name: prefix + name for name in SCRIPT_KEY_NAMES}
        named["due"] = due_index_key(queue, cluster)
        return cls(
            queue=queue,
            prefix=prefix,
            script_keys=tuple(named.values()),
            events=prefix + EVENTS_NAME,
            history=prefix + HISTORY_NAME,
            cancelled=prefix + CANCELLED_NAME,
            rate=prefix + RATE_NAME,
            sessions=prefix + SESSIONS_NAME,
            ring=prefix + RING_NAME,
            groups=prefix + GROUPS_NAME,
            parked=prefix + PARKED_NAME,
            schedules=prefix + SCHEDULES_NAME,
            timetable=prefix + TIMETABLE_NAME,
            outbox=prefix + OUTBOX_NAME,
            flows=prefix + FLOWS_NAME,
            **named,
        )

    def job(self, job_id: str) -> str:
        return self.prefix + job_id + JOB_SUFFIX

    def lock(self, job_id: str) -> str:
        return self.prefix + job_id + LOCK_SUFFIX

    def held(self, worker: str) -> str:
        return self.prefix + worker + HELD_SUFFIX

    def session(self, worker: str) -> str:
        return self.prefix + worker + SESSION_SUFFIX

    def owner(self, worker: str) -> str:
        return self.prefix + worker + OWNER_SUFFIX

    def request(self, worker: str, request_id: str) -> str:
        return self.prefix + worker + ":" + request_id + REQUEST_SUFFIX

    @property
    def request_pattern(self) -> str:
        """A SCAN pattern of every lease request record of the queue: names hold no glob
        character, and no other key of the queue ends with REQUEST_SUFFIX."""
        return self.prefix + "*" + REQUEST_SUFFIX

    def group_wait(self, group: str) -> str:
        return self.prefix + group + GROUP_WAIT_SUFFIX

    def group(self, group: str) -> str:
        return self.prefix + group + GROUP_SUFFIX

    def flow_record(self, root_id: str) -> str:
        return self.prefix + root_id + FLOW_SUFFIX

    def schedule(self, schedule: str) -> str:
        return self.prefix + schedule + SCHEDULE_SUFFIX


def ui_session_key(session_digest: str) -> str:
    return UI_SESSION_PREFIX + session_digest


def sign_in_failures_key(address: str, window: int) -> str:
    return f"{SIGN_IN_FAILURES_PREFIX}{address}:{window}"


def queue_of_wake_channel(channel: str) -> str:
    """The queue name inside a wake channel name (the text between the braces)."""
    return channel[channel.index("{") + 1 : channel.rindex("}")]


@lru_cache(maxsize=4096)
def keys_of(queue: str, cluster: bool = False) -> QueueKeys:
    """A queue's keys, built once per queue name."""
    return QueueKeys.for_queue(queue, cluster)


def key_slot(key: str) -> int:
    """The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag, or of the whole key."""
    data = key.encode()
    start = data.find(b"{")
    if start != -1:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return binascii.crc_hqx(data, 0) % CLUSTER_SLOTS


@lru_cache(maxsize=1)
def _slot_tags() -> tuple[str, ...]:
    """For every slot, a short tag that hashes to it (the shortest, alphabetically first)."""
    tags: list[str | None] = [None] * CLUSTER_SLOTS
    missing = CLUSTER_SLOTS
    for length in itertools.count(1):
        for letters in itertools.product(_TAG_ALPHABET, repeat=length):
            tag = "".join(letters)
            slot = binascii.crc_hqx(tag.encode(), 0) % CLUSTER_SLOTS
            if tags[slot] is None:
                tags[slot] = tag
                missing -= 1
                if not missing:
                    return tuple(tags)  # type: ignore[arg-type]
    raise AssertionError("unreachable")


def due_index_key(queue: str, cluster: bool) -> str:
    """The due index a queue's scripts write: on a Cluster the one of the queue's slot."""
    if not cluster:
        return DUE_INDEX
    return f"{DUE_INDEX}:{{{_slot_tags()[key_slot(queue_prefix(queue))]}}}"
