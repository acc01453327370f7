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
    cut = batches(items, parallel_files * max(1, int(getattr(source, "batch_scale", 1))))
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
        left = list(self.t.pending.values())
        while left:
            # a peer source's order, asked again before each batch: its Hub share first, then the files
            # its last look saw held by a peer, then the rest (each part in its shuffled order)
            chunk = next_batch(left, self.t.source, self.t.aria2.parallel_files)
            self._batch(chunk)
            done = {item.key for item in chunk}
            left = [item for item in left if item.key not in done]
        return self.wait_hint

    def _batch(self, chunk: Sequence[_snapshot_plan.Item]) -> None:
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

    def _aria2(self, batch: list[tuple[_snapshot_plan.Item, str]]) -> None:
        t = self.t
        # No checksum= for aria2: it would hash in its single thread after the transfer.
        jobs = [_aria2.Aria2File(item.key, url, t.staging, item.key, None, item.remote.size,
                                 self.res[item.key].mirrors, self.res[item.key].header) for item, url in batch]
        self.batch = {item.key: item for item, url in batch}
        self.hashes = {}
        self.early = set()
        self.pool = ThreadPoolExecutor(max_workers=t.hash_workers or _hashing.default_workers())
        mark = time.monotonic()
        try:
            result = _aria2.run(
                jobs, os.path.join(t.staging, _snapshot_staging.ARIA2_WORKDIR), t.aria2,
                tick=t.progress.write, tick_interval=PROGRESS_INTERVAL, on_complete=self._hash_later,
                poll=self._place_verified)
            mark = t.timings.took("aria2", mark)
            for item, dummy in batch:
                if result.outcomes[item.key].status == "OK":
                    self._hash_later(item.key)
            hashed = {key: future.result() for key, future in self.hashes.items()}
        finally:
            self.pool.shutdown(wait=True)
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
