"""The claim protocol: no answer is paid twice, across processes and machines sharing one cache.

Before sending, a worker claims the call's key in the shared cache (a claim row: owner, lease expiry).
The owner names the host and the process id. A key that another live worker holds is not sent: this
worker waits for its answer to appear in the cache. Claims are kept alive by a heartbeat; a worker
that dies (even by `kill -9`) stops renewing. On the same host a dead owner is seen at once (its
process no longer exists) and its calls are taken over without waiting; a worker on another host is
only known dead when its leases run out. A call that ends as an API failure is released (not cached),
so another worker or a rerun asks it again.

All database work runs on one thread of its own, off the event loop, so a server round trip never
stalls requests in flight (and a SQLite connection is only ever used by one thread at a time)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from popfair.store.owners import new_owner, owner_is_dead
from popfair.store.responses import CachedAnswer, ResponseCache

log = logging.getLogger("popfair.screen")
T = TypeVar("T")
C = TypeVar("C")


class CacheThread:
    """Runs cache calls on one dedicated thread and awaits them."""

    def __init__(self, cache: ResponseCache) -> None:
        self.cache = cache
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="popfair-cache")
        self._to_store: list[tuple[tuple[str, str, str, CachedAnswer], asyncio.Future[None]]] = []
        self._storing: asyncio.Task[None] | None = None

    async def __call__(self, method: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, method, *args)

    async def put(self, key: str, provider: str, model: str, answer: CachedAnswer) -> None:
        """Store one answer; returns once it is committed. Answers that arrive while a write is under
        way are committed together by the next one (group commit: one thread hop and one commit for
        all of them, instead of one each, at hundreds of answers per second)."""
        done = asyncio.get_running_loop().create_future()
        self._to_store.append(((key, provider, model, answer), done))
        if self._storing is None:
            self._storing = asyncio.create_task(self._store())
        await done

    async def put_all(self, items: Sequence[tuple[str, str, str, CachedAnswer]]) -> None:
        """Store several answers of one response (an `n`-answer request) in one commit: appended
        together, they go in the same group write, so no other worker sees some of them without the rest."""
        loop = asyncio.get_running_loop()
        waits = []
        for item in items:
            done = loop.create_future()
            self._to_store.append((item, done))
            waits.append(done)
        if self._storing is None:
            self._storing = asyncio.create_task(self._store())
        await asyncio.gather(*waits)

    async def _store(self) -> None:
        try:
            while self._to_store:
                group, self._to_store = self._to_store, []
                try:
                    await self(self.cache.put_many, [item for item, _ in group])
                except Exception as exc:  # each waiting request sees the failure as its own
                    for _, done in group:
                        if not done.done():
                            done.set_exception(exc)
                else:
                    for _, done in group:
                        if not done.done():
                            done.set_result(None)
        finally:
            self._storing = None

    def close(self) -> None:
        """Commit answers still waiting for a group write (the run was cancelled, e.g. by Ctrl-C,
        before its writer picked them up), then stop the thread."""
        pending, self._to_store = self._to_store, []
        if pending:
            self._pool.submit(self.cache.put_many, [item for item, _ in pending]).result()
        self._pool.shutdown(wait=True)


class ClaimBroker(Generic[C]):
    """Hands out, one at a time, the calls this worker may send (claimed) and the calls another
    worker answered while this one waited. `key(call)` gives a call's cache key."""

    def __init__(
        self, db: CacheThread, calls: Sequence[C], key: Callable[[C], str], *, lease_s: float, poll_s: float, chunk: int
    ) -> None:
        self.db, self.key = db, key
        self.lease_s, self.poll_s, self.chunk = lease_s, poll_s, max(1, chunk)
        self.owner = new_owner()
        self.pending: deque[C] = deque(calls)
        self.ready: deque[C] = deque()  # claimed by us, not yet handed out
        self.resolved: deque[tuple[C, CachedAnswer]] = deque()  # answered by another worker
        self.waiting: dict[str, C] = {}  # held by another worker
        self.waited = self.taken_over = 0
        self.dead_owners: set[str] = set()  # owners on this host found dead (their calls were taken over)
        self._lock = asyncio.Lock()
        self._last_poll = time.monotonic()
        self._heartbeat: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ClaimBroker[C]:
        self._heartbeat = asyncio.create_task(self._renew_forever())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        await self.db(self.db.cache.release, self.owner, None)  # e.g. calls a budget stop left unsent

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                await self.db(self.db.cache.renew, self.owner, self.lease_s)
            except Exception:  # a missed heartbeat only risks a takeover; the next one may succeed
                log.warning("could not renew response-cache claims", exc_info=True)

    async def next(self) -> tuple[C, CachedAnswer | None] | None:
        """(call, None): send it; (call, answer): another worker answered it; None: nothing left."""
        async with self._lock:
            while True:
                if self.waiting and time.monotonic() - self._last_poll >= self.poll_s:
                    await self._poll()
                if self.resolved:
                    return self.resolved.popleft()
                if self.ready:
                    return self.ready.popleft(), None
                if self.pending:
                    take = min(self.chunk, len(self.pending))
                    await self._claim([self.pending.popleft() for _ in range(take)])
                elif self.waiting:
                    await asyncio.sleep(max(0.0, self._last_poll + self.poll_s - time.monotonic()))
                    await self._poll()
                else:
                    return None

    async def release(self, call: C) -> None:
        """Give up a claimed call that got no answer (an API failure): others may ask it."""
        await self.db(self.db.cache.release, self.owner, [self.key(call)])

    async def _claim(self, calls: list[C]) -> None:
        mine, taken_over = await self.db(self.db.cache.claim, [self.key(c) for c in calls], self.owner, self.lease_s)
        if taken_over:
            log.warning("took over %d call(s) whose claim had expired (a worker died?)", taken_over)
        self.taken_over += taken_over
        held = set(mine)
        others = [c for c in calls if self.key(c) not in held]
        self.ready.extend(c for c in calls if self.key(c) in held)
        if others:
            found = await self.db(self.db.cache.get_many, [self.key(c) for c in others])
            unanswered = []
            for call in others:
                if self.key(call) in found:
                    self.resolved.append((call, found[self.key(call)]))
                    self.waited += 1
                else:
                    unanswered.append(call)
            orphans = await self._orphans(unanswered)
            for call in unanswered:
                if self.key(call) not in orphans:
                    self.waiting[self.key(call)] = call
            if orphans:
                await self._claim([c for c in unanswered if self.key(c) in orphans])

    async def _orphans(self, calls: list[C]) -> set[str]:
        """Keys among `calls` whose owner is a dead process of this host: its claims are dropped at once
        (no wait for the lease), and the keys returned to be claimed again."""
        if not calls:
            return set()
        owners = await self.db(self.db.cache.claim_owners, [self.key(c) for c in calls])
        dead = {owner for owner in set(owners.values()) - self.dead_owners if owner_is_dead(owner)}
        if not dead:
            return set()
        for owner in dead:
            await self.db(self.db.cache.release, owner, None)
        self.dead_owners |= dead
        orphans = {key for key, owner in owners.items() if owner in dead}
        self.taken_over += len(orphans)
        pids = sorted(owner.split(":")[-2] for owner in dead)
        log.warning(
            "took over %d call(s) claimed by process %s on this host, which no longer runs (no lease wait)",
            len(orphans),
            ", ".join(pids),
        )
        return orphans

    async def _poll(self) -> None:
        """Collect answers that other workers stored; claim what they gave up or left expiring."""
        self._last_poll = time.monotonic()
        calls = list(self.waiting.values())
        self.waiting.clear()
        await self._claim(calls)
