"""Work shared by the processes that need the same content-addressed results at once: the gender and
race cases of a parallel sweep rendering the same pages or encoding the same resumes, or the workers
of a cluster sweep on one server cache.

Each result has a key (a hex digest: `popfair.store.blobs.content_key`, a document store key). Its first
BUCKET_DIGITS hex digits put it in one of 256 buckets, the same for every process whatever else it
works on. A process claims free buckets until they hold a round's worth of its keys (one transaction
in the blob store's claims, `BlobStore.claim`), computes and stores what they still lack, releases
them and claims the next round; buckets another process holds are handed out once released, when
their results are stored and only need reading. A claim names the host and process
(`popfair.store.owners`): one of a process of this host that has died is taken over at once, one of
another host when its lease runs out. A store whose claims fail is worked through unclaimed."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence

from popfair.store.blobs import STORE_ERRORS, BlobStore
from popfair.store.owners import new_owner

log = logging.getLogger("popfair")
BUCKET_DIGITS = 2  # 256 buckets
LEASE_S = 600.0  # a claim of a dead process on another host is free after this
POLL_S = 0.5  # how often a process whose buckets are all held by others looks again


def claimed_rounds(
    store: BlobStore, scope: str, keys: Sequence[str], per_round: int, owner: str | None = None
) -> Iterator[list[int]]:
    """Positions in `keys` to compute and store, a round at a time. Every position is handed out
    once; a round's buckets stay claimed until the caller asks for the next round (or stops).
    `scope` names what is computed (a renderer's identity, a model's), so that unrelated work on
    the same store does not wait on each other. The caller looks each round's keys up first: a
    bucket another process held comes with its results stored."""
    owner = owner or new_owner()
    waiting: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        waiting.setdefault(key[:BUCKET_DIGITS], []).append(i)
    claims_work = True
    while waiting:
        mine = _claim_round(store, scope, owner, waiting, per_round) if claims_work else None
        if mine is None:  # the store's claims failed: the rest unclaimed
            claims_work = False
            mine = list(waiting)
        if not mine:  # every bucket left is being worked on by another process
            time.sleep(POLL_S)
            continue
        try:
            yield [i for bucket in mine for i in waiting.pop(bucket)]
        finally:
            if claims_work:
                try:
                    store.release([_claim_key(scope, bucket) for bucket in mine], owner)
                except STORE_ERRORS as exc:  # the lease runs out instead
                    log.warning("%s: cannot release claims (%s)", store.location, exc)


def _claim_round(
    store: BlobStore, scope: str, owner: str, waiting: dict[str, list[int]], per_round: int
) -> list[str] | None:
    """The buckets this process now holds, about a round's worth of keys: the waiting buckets are
    offered in groups that would complete the round, each group claimed in one transaction. None
    when the store's claims fail."""
    mine: list[str] = []
    held, candidates = 0, iter(list(waiting))
    while held < per_round:
        group, size = [], held
        for bucket in candidates:
            group.append(bucket)
            size += len(waiting[bucket])
            if size >= per_round:
                break
        if not group:
            break
        try:
            others = store.claim([_claim_key(scope, bucket) for bucket in group], owner, LEASE_S)
        except STORE_ERRORS as exc:
            log.warning("%s: claims unusable (%s); working without them", store.location, exc)
            with contextlib.suppress(*STORE_ERRORS):  # what was claimed: released, or its lease runs out
                store.release([_claim_key(scope, bucket) for bucket in mine], owner)
            return None
        claimed = [bucket for bucket in group if _claim_key(scope, bucket) not in others]
        mine += claimed
        held += sum(len(waiting[bucket]) for bucket in claimed)
    return mine


def _claim_key(scope: str, bucket: str) -> str:
    return f"claim:{scope}:{bucket}"
