# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One round of a transfer: the pending files, batch by batch, resolved, fetched and settled.

Private to the collection: not a public API, may change without notice.

``Round`` is what ``transfer.Transfer`` runs until no file is pending: ``batches`` cuts the pending
files (as many large files as aria2 fetches at once, small ones riding along), each batch is resolved
through the transfer's source just before its aria2c starts, the source's ``direct`` files download
beside it, each file is hashed as soon as aria2 says it is complete and, once its hash matched, placed
at once (``_place_verified``, from aria2's poll: in place and published to the peers while the batch's
other files still download, so a host re-serves every file as soon as it has verified it). Once aria2
has ended, every file of the batch is settled by aria2's outcome: the source credits and learns what
each URI did (also for the files placed early), and each file not placed yet is placed, resumed next
round, started over, or failed (with what the servers asked to wait).

A source with ``lanes`` (a peer source) runs its round in lanes instead (``_run_lanes``): each look's
files in an aria2c of their own (``aria2.Aria2Run``), up to ``parallel_files`` large files at once, and a
slot filled as soon as aria2 reports a large file complete, while the others go on; a lane is settled as
above once its aria2c has ended and its files' hashes are done, and nothing waits for a hash meanwhile.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import aria2 as _aria2
from ansible_collections.gpufleet.llm.plugins.module_utils._common import hashing as _hashing
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _snapshot_plan
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _snapshot_staging
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import direct as _transfer_direct
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.progress import PROGRESS_INTERVAL
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.source import Resolution, SourceError

# aria2 exit codes after which the staging file cannot be resumed (checksum failed, the server
# cannot resume, the control file is unusable): the next round starts the file over.
RESTART_CODES = frozenset((32, 8, 10))
DISK_FULL_CODE = 9
# What aria2 (or the CDN) says when a signed URL expired or was refused: the next round re-resolves.
URL_REFUSED_STATUSES = (403, 410)
# Files up to this size ride along in a batch without taking one of its parallel_files places: they
# take moments, so they cannot hold a batch's large files back nor outlive their URLs.
SMALL_FILE = 64 << 20
# How often a lanes round looks at its aria2c runs (completions, ends) while they download.
LANE_POLL = 0.1
MISMATCH = "downloaded bytes do not match the Hub's id"


def batches(items: Sequence[_snapshot_plan.Item], parallel_files: int) -> list[list[_snapshot_plan.Item]]:
    """``items`` in order, cut into batches of ``parallel_files`` large files each (small ones ride along).

    A batch is resolved just before its aria2c starts: a URL signed for the whole queue up front would
    expire before aria2 reached the files at its end, and burn a retry round on each of them.
    """
    out: list[list[_snapshot_plan.Item]] = []
    current: list[_snapshot_plan.Item] = []
    large = 0
    for item in items:
        if item.remote.size > SMALL_FILE:
            if large >= max(1, parallel_files):
                out.append(current)
                current, large = [], 0
            large += 1
        current.append(item)
    if current:
        out.append(current)
    return out


def next_batch(items: Sequence[_snapshot_plan.Item], source: Any, parallel_files: int) -> list[_snapshot_plan.Item]:
    """The next batch of a round, of the files it has not tried yet: the first of ``batches``, in the
    source's own order when it has one (a peer source's ``queue``). Asked again before each batch, so
    what the source learnt meanwhile (a peer source's last look: who holds what now) decides which
    files go next, not the order the round started with."""
    queue = getattr(source, "queue", None)
    if queue is not None:
        items = queue(items)
    cut = batches(items, parallel_files)
    return cut[0] if cut else []


class Round(object):
    """One pass over the pending files, batch by batch: resolve, one aria2c, settle each file."""

    def __init__(self, transfer: Any) -> None:
        # the Transfer this round serves: its pending files, staging, source, errors and tries
        self.t = transfer
        self.wait_hint = 0.0  # what the servers asked us to wait before the next round
        self.batch: dict[str, _snapshot_plan.Item] = {}
        self.hashes: dict[str, Any] = {}
        # content keys of the batch placed while its aria2c still ran (_place_verified)
        self.early: set[str] = set()
        self.pool: ThreadPoolExecutor | None = None
        self.expires: dict[str, float | None] = {}
        self.res: dict[str, Resolution] = {}
        self.failed_keys: set[str] = set()
        self.final_keys: set[str] = set()
        # failed because of a peer the source then dropped (or switched to one peer at a time): no try used
        self.excused_keys: set[str] = set()
        self.waiting = False

    def run(self) -> float:
        """Returns the wait the servers asked for (Retry-After), 0 when none."""
        self.pool = ThreadPoolExecutor(max_workers=self.t.hash_workers or _hashing.default_workers())
        try:
            if getattr(self.t.source, "lanes", False):
                self._run_lanes()
                return self.wait_hint
            left = list(self.t.pending.values())
            while left:
                chunk = next_batch(left, self.t.source, self.t.aria2.parallel_files)
                self._batch(chunk)
                done = {item.key for item in chunk}
                left = [item for item in left if item.key not in done]
        finally:
            self.pool.shutdown(wait=True)
        return self.wait_hint

    def _run_lanes(self) -> None:
        """A lanes source's round (a peer source): up to ``parallel_files`` large files downloading at once,
        each look's files in their own aria2c (a ``_Lane``), and a slot filled as soon as aria2 reports a
        large file complete, from the source's order asked again then (its last look: who holds what now),
        instead of after a whole batch has ended. A look that leaves files waiting (their owner has not
        published them, or the hosts placed before this one take them first) is the last until a slot frees
        or, while slots stay free, the source's poll pause has passed; every file not started is asked again
        then. The round ends when nothing runs and every file left waits (the transfer pauses, then a new
        round asks again), or none is left."""
        t = self.t
        left = list(t.pending.values())
        lanes: list[_Lane] = []
        # the last look left files waiting: no other look before a slot frees or the poll pause has passed
        hold = False
        next_look: float | None = None
        next_tick = time.monotonic() + PROGRESS_INTERVAL
        serial = 0
        mark = time.monotonic()
        running = 0
        try:
            while True:
                self._poll_lanes(lanes)
                # a slot is a large file aria2 has not reported complete (the lane's aria2c may run on)
                was, running = running, sum(lane.running(self.hashes) for lane in lanes)
                if running < was:
                    hold = False  # a slot freed
                now = time.monotonic()
                if next_look is not None and now >= next_look:
                    hold, next_look = False, None
                free = t.aria2.parallel_files - running
                if free > 0 and left and not hold:
                    chunk = next_batch(left, t.source, free)
                    serial += 1
                    lane, waits = self._open_lane(chunk, serial)
                    if lane is not None:
                        lanes.append(lane)
                    tried = {item.key for item in chunk} - waits
                    left = [item for item in left if item.key not in tried]
                    hold, next_look = bool(waits), None
                    continue
                if not lanes:
                    break  # every file left waits (_resolve noted it), or none is left
                if hold and free > 0 and next_look is None:
                    next_look = now + t.source.poll_pause()
                if now >= next_tick:
                    next_tick = now + PROGRESS_INTERVAL
                    t.progress.write()
                time.sleep(LANE_POLL)
        finally:
            for lane in lanes:
                lane.stop()
            t.timings.took("aria2", mark)

    def _open_lane(self, chunk: Sequence[_snapshot_plan.Item], serial: int) -> tuple["_Lane | None", set[str]]:
        """Resolve ``chunk`` and start what resolved: its own aria2c (and direct downloads). Returns the lane
        (None when nothing started) and the keys that wait."""
        batch, direct = self._resolve(chunk)
        waits = {item.key for item in chunk if item.key in self.res and self.res[item.key].wait}
        if not batch and not direct:
            return None, waits
        fetches = _transfer_direct.DirectFetches(self._fetch_direct, workers=self.t.aria2.parallel_files)
        run = None
        try:
            fetches.start(direct)
            if batch:
                run = _aria2.Aria2Run(self._jobs(batch), os.path.join(self.t.staging, _snapshot_staging.ARIA2_WORKDIR),
                                      self.t.aria2, on_complete=self._hash_later, name="lane%d" % serial)
        except BaseException:
            fetches.close()
            raise
        return _Lane(batch, direct, run, fetches), waits

    def _poll_lanes(self, lanes: list["_Lane"]) -> None:
        """Each lane's completions hashed, verified files placed. A lane whose aria2c and direct downloads have
        ended gets its outcome (the files aria2 finished but had not logged are hashed now); once the hashes
        of its files are done too, it is settled and taken out (``lanes`` is changed in place). Nothing here
        waits for a hash: a shard's takes seconds, during which the other lanes' slots are filled."""
        for lane in lanes:
            if not lane.ended and lane.poll():
                try:
                    lane.result = lane.run.finish() if lane.run is not None else None
                    lane.direct_results = lane.fetches.wait(self.t.progress.write, PROGRESS_INTERVAL)
                finally:
                    lane.fetches.close()
                if lane.result is not None:
                    self._hash_finished(lane.batch, lane.result)
        self._place_verified()
        for lane in [lane for lane in lanes if lane.ended]:
            if not all(self.hashes[item.key].done() for item, dummy in lane.batch if item.key in self.hashes):
                continue
            try:
                if lane.result is not None:
                    self._settle_run(lane.batch, lane.result)
                self._direct_results(lane.direct_results)
            finally:
                lanes.remove(lane)  # only now: what raised before leaves the others to the caller's stop

    def _resolve(self, chunk: Sequence[_snapshot_plan.Item]) -> tuple[list, list]:
        """The files of ``chunk`` that go (for aria2, and direct), as (item, url); waits and failures noted."""
        mark = time.monotonic()
        resolved = self.t.source.resolve(chunk)
        self.t.timings.took("resolve", mark)
        batch = []
        direct = []
        for item, res in resolved:
            self.expires[item.key] = res.expires
            self.res[item.key] = res
            if res.wait:
                self.waiting = True
            elif res.url is None:
                self._failed(item, res.error, res.retry_after, final=res.final)
            elif res.direct:
                # The endpoint serves these bytes itself, with the token: never through aria2, which
                # would resend the Authorization header to wherever a redirect of the GET points.
                self.t.start_clean_unless_same(item, res)
                direct.append((item, res.url))
            else:
                self.t.start_clean_unless_same(item, res)
                batch.append((item, res.url))
        return batch, direct

    def _batch(self, chunk: Sequence[_snapshot_plan.Item]) -> None:
        batch, direct = self._resolve(chunk)
        # Direct files download beside aria2, not before it: a gated repo's small files must not
        # hold its large ones back.
        fetches = _transfer_direct.DirectFetches(self._fetch_direct, workers=self.t.aria2.parallel_files)
        try:
            fetches.start(direct)
            if batch:
                self._aria2(batch)
            results = fetches.wait(self.t.progress.write, PROGRESS_INTERVAL)
        finally:
            fetches.close()
        self._direct_results(results)

    def _direct_results(self, results: Sequence[tuple[_snapshot_plan.Item, Any]]) -> None:
        for item, result in results:
            if result.digest is None:
                self._failed(item, result.error, result.retry_after)
                if result.error == MISMATCH and item.key in self.t.inherited:
                    self.excused_keys.add(item.key)  # an earlier run's bytes were resumed: no try used
            else:
                item.sha256 = result.digest
                self._placed(item)

    def _placed(self, item: _snapshot_plan.Item) -> None:
        res = self.res.get(item.key)
        self.t.origins[item.key] = res.origin if res is not None else "hub"
        self.t.placed(item)

    def _failed(self, item: _snapshot_plan.Item, error: str, retry_after: float = 0.0, *, final: bool = False) -> None:
        self.t.errors[item.remote.path] = error
        self.failed_keys.add(item.key)
        if final:
            self.final_keys.add(item.key)
        self.wait_hint = max(self.wait_hint, retry_after or 0.0)

    def _fetch_direct(self, item: _snapshot_plan.Item, url: str) -> _transfer_direct.DirectResult:
        """In a worker thread: download and verify one direct file; the round's thread places it."""
        staged = self.t.staged(item)
        if os.path.exists(staged + ".aria2"):
            # aria2's partial may have holes (several connections): not a prefix a Range can continue
            _snapshot_staging.remove(staged, staged + ".aria2")
        _snapshot_staging.mark_direct(staged)
        try:
            self.t.source.download(url, staged, item.remote.size)
        except SourceError as exc:
            # the bytes that arrived stay, marked: the next round asks only for the rest
            return _transfer_direct.DirectResult(None, exc.message, exc.retry_after)
        have = os.path.getsize(staged) if os.path.exists(staged) else 0
        if have < item.remote.size:
            # the body ended early (a closed connection reads as the end): keep the prefix, marked
            return _transfer_direct.DirectResult(None, "GET: the body ended after %d of %d bytes" % (have, item.remote.size))
        ok, digest = _snapshot_plan.verify_local(staged, item.remote)
        _snapshot_staging.remove(staged + _snapshot_staging.DIRECT_MARK)
        if not ok:
            _snapshot_staging.remove(staged)
            return _transfer_direct.DirectResult(None, MISMATCH)
        return _transfer_direct.DirectResult(digest)

    def _hash_later(self, key: str) -> None:
        """Our single hash pass over a file, started as soon as aria2 reports it complete (it has
        closed it and never writes it again), while the other files still download."""
        item = self.batch.get(key)
        if item is None or key in self.hashes:
            return
        self.hashes[key] = self.pool.submit(_snapshot_staging.hash_staged, self.t.staged(item), item.remote)

    def _place_verified(self) -> None:
        """While aria2 runs (its poll, on the round's thread): place each file it reported complete whose
        hash is done and matched, so it is in place and published (the source's ``placed``: a peer source
        lists it in this host's peer-status) while the batch's other files still download. Only a file
        aria2 is through with (its control file removed, as aria2 does right after it logs the file
        complete), untouched since its hash (``same_stat``: the size the hash found as long as the listing
        says is part of the record); any other is left to ``_settle`` once aria2 has ended, as are a
        mismatch and a hash that raised."""
        for key, future in self.hashes.items():
            if key in self.early or not future.done() or future.exception() is not None:
                continue
            ok, digest, record = future.result()
            item = self.batch[key]
            staged = self.t.staged(item)
            if not ok or os.path.lexists(staged + ".aria2") or not _manifest.same_stat(record, staged):
                continue
            item.sha256 = digest
            self.early.add(key)
            self._placed(item)

    def _jobs(self, batch: list[tuple[_snapshot_plan.Item, str]]) -> list[_aria2.Aria2File]:
        """aria2's files for ``batch``, which the round now watches (``_hash_later``, ``_place_verified``)."""
        t = self.t
        # No checksum= for aria2: it would hash in its single thread after the transfer.
        jobs = [_aria2.Aria2File(item.key, url, t.staging, item.key, None, item.remote.size,
                                 self.res[item.key].mirrors, self.res[item.key].header) for item, url in batch]
        self.batch.update((item.key, item) for item, url in batch)
        return jobs

    def _aria2(self, batch: list[tuple[_snapshot_plan.Item, str]]) -> None:
        t = self.t
        jobs = self._jobs(batch)
        mark = time.monotonic()
        try:
            result = _aria2.run(
                jobs, os.path.join(t.staging, _snapshot_staging.ARIA2_WORKDIR), t.aria2,
                tick=t.progress.write, tick_interval=PROGRESS_INTERVAL, on_complete=self._hash_later,
                poll=self._place_verified)
        except BaseException:
            self._forget(batch)
            raise
        t.timings.took("aria2", mark)
        self._settle_run(batch, result)

    def _hash_finished(self, batch: Sequence[tuple[_snapshot_plan.Item, str]], result: Any) -> None:
        """Once ``batch``'s aria2c has ended: every file it finished is being hashed (also one its log did not
        report complete; ``_hash_later`` starts each file's hash once)."""
        for item, dummy in batch:
            if result.outcomes[item.key].status == "OK":
                self._hash_later(item.key)

    def _forget(self, batch: Sequence[tuple[_snapshot_plan.Item, str]]) -> None:
        """``batch``'s aria2c has ended and its files are settled: the round no longer watches them."""
        for item, dummy in batch:
            self.batch.pop(item.key, None)
            self.hashes.pop(item.key, None)
            self.early.discard(item.key)

    def _settle_run(self, batch: list[tuple[_snapshot_plan.Item, str]], result: Any) -> None:
        """Once ``batch``'s aria2c has ended: each file hashed (those aria2 finished), credited and settled."""
        try:
            self._settle_all(batch, result)
        finally:
            self._forget(batch)

    def _settle_all(self, batch: list[tuple[_snapshot_plan.Item, str]], result: Any) -> None:
        t = self.t
        mark = time.monotonic()
        self._hash_finished(batch, result)
        hashed = {item.key: self.hashes[item.key].result() for item, dummy in batch if item.key in self.hashes}
        t.timings.took("hash_after_aria2", mark)
        if result.retry_after:
            self.wait_hint = max(self.wait_hint, float(result.retry_after))
        credited = getattr(t.source, "credited", None)
        settled = getattr(t.source, "settled", None)
        for item, dummy in batch:
            if credited is not None:
                # of several mirrors, the one that served the file to its end gets the credit (14b)
                self.res[item.key] = self.res[item.key]._replace(origin=credited(self.res[item.key], result.uri_errors))
            inherited = item.key in t.inherited
            if item.key in self.early:
                # placed while aria2 ran, credited now: of its mirrors, the one that served it to its end
                self.t.origins[item.key] = self.res[item.key].origin
            else:
                self._settle(item, result.outcomes[item.key], hashed.get(item.key))
            mismatch = t.errors.get(item.remote.path) == MISMATCH and item.key in self.failed_keys
            if mismatch and inherited:
                # bytes an earlier run left were resumed: nobody of this run is to blame, and the file
                # (its staging removed by the mismatch) starts clean next round without using a try
                self.excused_keys.add(item.key)
                mismatch = False
            if settled is not None:
                # the source learns which of its URIs failed or served bad bytes (a peer to drop); True:
                # this file's failure was such a peer's, which the next round no longer uses
                excused = settled(item, self.res[item.key], uri_errors=result.uri_errors, mismatch=mismatch,
                                  failed=item.key in self.failed_keys)
                if excused and item.key in self.failed_keys:
                    self.excused_keys.add(item.key)

    def _settle(self, item: _snapshot_plan.Item, outcome: Any, hashed: tuple | None) -> None:
        """Place a file aria2 finished whose bytes match; otherwise record why not."""
        staged = self.t.staged(item)
        ctrl = staged + ".aria2"
        whole = outcome.status == "OK" and os.path.isfile(staged) and not os.path.exists(ctrl)
        if not whole:
            self._settle_unfinished(item, outcome, staged, ctrl)
            return
        if os.path.getsize(staged) != item.remote.size:
            self._failed(item, "size %d, expected %d" % (os.path.getsize(staged), item.remote.size))
            _snapshot_staging.remove(staged, ctrl)
            return
        ok, digest, record = hashed or (False, None, None)
        if not _manifest.same_stat(record, staged):
            # touched since (or while) it was hashed: only its bytes now decide
            ok, digest = _snapshot_plan.verify_local(staged, item.remote)
        if ok:
            item.sha256 = digest
            self._placed(item)
            return
        self._failed(item, MISMATCH)
        _snapshot_staging.remove(staged, ctrl)

    def _settle_unfinished(self, item: _snapshot_plan.Item, outcome: Any, staged: str, ctrl: str) -> None:
        """A file aria2 did not finish, by its exit code: resume it, start it over, or stop here."""
        code = outcome.code
        message = outcome.message or _aria2.explain(code)
        if code in RESTART_CODES:
            _snapshot_staging.remove(staged, ctrl)
        if code == DISK_FULL_CODE:
            raise SnapshotError("the disk under %s is full (aria2: %s) while fetching %s; free space or raise the volume"
                                % (self.t.dest, message, item.remote.path))
        error = "aria2 exit %s: %s" % (code, message) if code is not None else message
        if outcome.http_status in URL_REFUSED_STATUSES:
            expires = self.expires.get(item.key)
            if expires is None:
                error += " (signed URL expired or refused: re-resolving)"
            elif time.time() >= expires:
                error += " (signed URL expired %.0f s ago: re-resolving)" % (time.time() - expires)
            else:
                error += " (signed URL refused %.0f s before it expires: re-resolving)" % (expires - time.time())
        self._failed(item, error)


class _Lane(object):
    """One slot of a lanes round: one aria2c over the files a resolve started (one large file, small ones
    riding along) and the direct downloads resolved with them."""

    def __init__(self, batch: list, direct: list, run: Any, fetches: Any) -> None:
        self.batch = batch  # [(item, url)] for aria2
        self.run = run  # an _aria2.Aria2Run, or None when every file went direct
        self.fetches = fetches  # a _transfer_direct.DirectFetches
        self.large = [item.key for item, dummy in list(batch) + list(direct) if item.remote.size > SMALL_FILE]
        self.ended = False  # its aria2c and direct downloads have ended (``poll``): then what came of them is read
        self.result: Any = None  # aria2's RunResult (None: no aria2c)
        self.direct_results: list = []

    def running(self, complete: Any) -> int:
        """Its large files still downloading: not ``complete`` (the keys aria2 reported complete), until it ended."""
        return 0 if self.ended else sum(1 for key in self.large if key not in complete)

    def poll(self) -> bool:
        """True once its aria2c and its direct downloads have all ended."""
        ended = self.run is None or self.run.poll()
        self.ended = ended and self.fetches.done()
        return self.ended

    def stop(self) -> None:
        try:
            if self.run is not None:
                self.run.stop()
        finally:
            self.fetches.close()
