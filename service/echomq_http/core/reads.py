"""The queue reads: jobs, listings, the ledger, workers, groups, history, settings. Each is
one bounded script call or a few plain reads; none changes anything."""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator, Callable

from echomq_http.api.schemas.inspection import (
    GroupView,
    HistoryMinute,
    LedgerEntry,
    QueueView,
    WorkerHoldings,
)
from echomq_http.api.schemas.jobs import JobView
from echomq_http.api.schemas.operations import QueueSettings
from echomq_http.core import cursors
from echomq_http.core.bindings import (
    FailedPage,
    Groups,
    Job,
    Ledger,
    ListJobs,
    QueueCounts,
    SearchJobs,
    Workers,
    number,
)
from echomq_http.core.calls import QueueCalls
from echomq_http.core.errors import ScriptCode, raise_for_code
from echomq_http.core.views import ASCII_LOWER, HISTORY_KINDS, SETTINGS_FIELDS, job_view, settings_of
from echomq_http.store.chunked_read import chunked, read_hashes
from echomq_http.store.keys import QUEUE_REGISTRY, keys_of


class QueueReads(QueueCalls):
    """What the API and the dashboard read of a queue."""

    async def get_job(self, queue: str, job_id: str) -> JobView:
        async with self._gate:
            fields = await self.client.hgetall(self.keys(queue).job(job_id))
        if not fields:
            raise_for_code(ScriptCode.JOB_NOT_FOUND, job_id)
        return job_view(queue, job_id, fields)

    async def job_and_position(self, queue: str, job_id: str) -> tuple[JobView | None, int]:
        """The job (None when there is none) and the number of the queue's last event, read in
        one step: every event after that number happened after this view of the job."""
        read = Job.reply(await self._call("job", queue, job_id, job_id=job_id))
        return (None if read.fields is None else job_view(queue, job_id, read.fields)), read.position

    async def job_details(self, queue: str, job_id: str) -> tuple[JobView | None, int | None, int]:
        """The job (None: there is none), the fence of its last lease (None: never leased) and
        the number of the queue's last event, read in one step (lua/job.lua)."""
        read = Job.reply(await self._call("job", queue, job_id, job_id=job_id))
        if read.fields is None:
            return None, None, read.position
        return job_view(queue, job_id, read.fields), number(read.fields.get(b"fence")), read.position

    async def history(self, queue: str, minutes: int) -> list[HistoryMinute]:
        """Per-minute counts of the last `minutes` minutes (the last one the current), from the
        queue's history hash (lua/include/history.lua count_history), zeros included."""
        async with self._gate:
            seconds, micros = await self.client.time()
            history_key = self.keys(queue).history
            now = seconds * 1000 + micros // 1000
            current = now - now % 60_000
            starts = [current - 60_000 * back for back in range(minutes - 1, -1, -1)]
            fields = [f"{start}:{kind}" for start in starts for kind in HISTORY_KINDS]
            counts = await self.client.hmget(history_key, fields)
        values = [int(count) if count is not None else 0 for count in counts]
        width = len(HISTORY_KINDS)
        return [HistoryMinute(start, *values[i * width : (i + 1) * width]) for i, start in enumerate(starts)]

    async def search_jobs(
        self, queue: str, state: str, text: str, offset: int, budget: int, limit: int
    ) -> tuple[list[str], int, int]:
        """One bounded step of a search for text in the payloads and errors of a state's jobs
        (lua/search_jobs.lua): the ids that hold it, where the next step starts, and how many
        entries the state holds (the scan is done when the next step would start there)."""
        reply = await self._call(
            "search-jobs", queue, state, text.translate(ASCII_LOWER), offset, budget, limit
        )
        return SearchJobs.reply(reply)

    async def recent_events(
        self, queue: str, before: int | None, count: int
    ) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """Up to `count` entries of the queue's event stream, newest first, from just before the
        entry numbered `before` (None: from the newest); an entry is one script call's events."""
        end = "+" if before is None else f"(0-{before}"
        async with self._gate:
            return await self.client.xrevrange(self.keys(queue).events, end, "-", count=count)  # type: ignore[no-any-return]

    async def server_time_ms(self) -> int:
        """Redis's clock, the one every time the service stores comes from."""
        async with self._gate:
            seconds, micros = await self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def get_settings(self, queue: str) -> QueueSettings:
        """The queue's settings, read from its META now (a queue never used has the defaults)."""
        async with self._gate:
            values = await self.client.hmget(self.keys(queue).meta, SETTINGS_FIELDS)
        return settings_of(values)

    async def events_off(self, queue: str) -> bool:
        """Whether the queue's settings turned its events off (read now: one HEXISTS)."""
        async with self._gate:
            return bool(await self.client.hexists(self.keys(queue).meta, "events_off"))

    async def groups(self, queue: str, after: str | None, limit: int) -> tuple[list[GroupView], str | None]:
        """A page of the queue's groups by name after `after` (None: from the first), and the
        next page's cursor (the page's last group; None on the last page)."""
        views, more = Groups.reply(await self._call("groups", queue, after or "", limit))
        return views, views[-1].group if more and views else None

    async def queue_view(self, queue: str) -> QueueView:
        paused, counts = QueueCounts.reply(await self._call("counts", queue))
        return QueueView(name=queue, paused=paused, counts=counts)

    async def queue_names(self) -> list[str]:
        """Every registered queue, by name: at most EMQ_MAX_QUEUES (one SMEMBERS)."""
        async with self._gate:
            names = await self.client.smembers(QUEUE_REGISTRY)
        return sorted(name.decode() for name in names)

    async def queue_page(
        self, after: str | None, limit: int, prefix: str = "", covers: Callable[[str], bool] | None = None
    ) -> tuple[list[str], str | None]:
        """A page of the registered queues by name: up to `limit` names after `after` (None: from
        the first) that start with `prefix` and that `covers` lets through (None: all), and the
        next page's cursor (the page's last name; None on the last page). The registry is a SET
        of at most EMQ_MAX_QUEUES names, read whole and sorted here: a few ms at the cap, and
        what is costly (each queue's counts) is then read for one page only."""
        names = [
            name
            for name in await self.queue_names()
            if name.startswith(prefix) and (covers is None or covers(name))
        ]
        start = bisect.bisect_right(names, after) if after is not None else 0
        page = names[start : start + limit]
        return page, page[-1] if start + limit < len(names) else None

    async def ledger(self, queue: str, worker: str | None, offset: int, limit: int) -> list[LedgerEntry]:
        return Ledger.reply(await self._call("ledger", queue, offset, limit, worker or ""))

    async def workers(self, queue: str) -> list[WorkerHoldings]:
        return Workers.reply(await self._call("workers", queue))

    async def failed_page(
        self, queue: str, offset: int, limit: int
    ) -> tuple[AsyncIterator[list[JobView]], int]:
        """The page's jobs, chunk by chunk as the caller iterates, and the total. The ids (and
        payload sizes) come from one short script call; the hashes from chunked reads
        (echomq_http.store.chunked_read), so a page of large jobs never holds anything for long."""
        listing, total = FailedPage.reply(await self._call("failed-page", queue, offset, limit))
        return self._jobs_still_in(queue, "failed", listing), total

    async def list_jobs(
        self, queue: str, state: str, limit: int, cursor: str | None
    ) -> tuple[AsyncIterator[list[JobView]], str | None]:
        """A page of the jobs in a state, from a cursor (None: the first page): the jobs chunk by
        chunk as the caller iterates, and the next page's cursor (None: this is the last). The
        ids come from one bounded script call (lua/list_jobs.lua), the hashes as for
        failed_page. A malformed cursor, or one of another state, is an InvalidRequest."""
        after = cursors.decode(cursor, state) if cursor is not None else [""]
        listing, script_cursor = ListJobs.reply(await self._call("list-jobs", queue, state, limit, *after))
        return self._jobs_still_in(queue, state, listing), cursors.encode(state, script_cursor)

    async def _jobs_still_in(
        self, queue: str, state: str, sized_ids: list[tuple[str, int]]
    ) -> AsyncIterator[list[JobView]]:
        """Each chunk's jobs that are still in the state when it is read: one that left it (a
        dead letter redriven, a job deleted) since its id was read is left out."""
        queue_keys = keys_of(queue)
        wanted = state.encode()
        for ids in chunked(sized_ids):
            async with self._gate:
                hashes = await read_hashes(self.client, [queue_keys.job(job_id) for job_id in ids])
            yield [
                job_view(queue, job_id, fields)
                for job_id, fields in zip(ids, hashes, strict=True)
                if fields.get(b"state") == wanted
            ]
