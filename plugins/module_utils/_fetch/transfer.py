# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fetching files into staging and placing them once verified: a URL source, aria2, our own hashes.

Private to the collection: not a public API, may change without notice.

``Transfer`` fetches a set of plan.Items (each knows its size and the Hub's id for its bytes) into
``<dest>/.gpufleet/staging/`` and renames each to its final path once its hash matched. It works in
rounds (``_Round``) over the pending files, batch by batch (``batches``: as many large files as
aria2 fetches at once, small ones riding along): resolve the batch's files to URLs through a
*source* just before the batch starts, so a signed URL is never minutes old when aria2 first uses
it; fetch with one aria2c per batch, then settle each file by aria2's outcome. A failed file is
retried in the next round with a fresh URL, after a backoff that honours the servers' Retry-After.

A source is any object with

- ``resolve(items) -> [(item, Resolution)]``: a URL per item, or the error of this round; raises
  SnapshotError for what no retry can fix;
- optionally ``settled(item, resolution, uri_errors=, mismatch=, failed=) -> bool``: after aria2, what each of
  its URIs did; True when the file's failure was a URI the source no longer uses (a dropped peer), or
  a peer's passing fault: that round uses none of the file's ``max_tries``;
- optionally ``credited(resolution, uri_errors) -> str``: the origin a file aria2 finished is credited
  to (of several mirrors, one that served it to the end, not one that failed on the way);
- ``download(url, out_path, size)``: fetch a URL the source marked ``direct`` (bytes the source's own
  endpoint serves, with its credentials), raising SourceError; called from several threads at once
  (``_transfer_direct``: up to ``parallel_files`` direct files, while the batch's aria2c runs);

``HubSource`` is the Hub's ``/resolve/`` endpoint. Each file is hashed once, here, in a thread pool,
as soon as aria2's log says it is complete, while the other files still download.

Partial bytes are resumed only from the sources that wrote them (``Transfer.partial_from``): a
staging file that another source set began (a peer dropped mid-file, then another peer or the Hub)
is discarded, with its ``.aria2`` control file, before the next source starts, so a hash mismatch
always belongs to the source that served every byte of the file, and no honest source is blamed
(nor loses a try) for another's bytes. A partial left by an earlier run (its source unknown) is
still resumed, but a mismatch on it blames nobody and uses no try: the file then starts clean.
"""

from __future__ import annotations

import http.client
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import aria2 as _aria2
from ansible_collections.gpufleet.llm.plugins.module_utils._common import hashing as _hashing
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._common import paths as _paths
from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _snapshot_plan
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _snapshot_staging
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import direct as _transfer_direct
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError, backoff
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.progress import PROGRESS_INTERVAL

# A server's Retry-After is honoured up to this many seconds.
MAX_RETRY_AFTER = 600.0
# Parallel HEADs per round: resolving is latency, not bandwidth.
RESOLVE_THREADS = 8
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


class SourceError(Exception):
    """A file a source could not serve this round; ``message`` is its error, retried next round."""

    def __init__(self, message: str, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class Resolution(NamedTuple):
    """Where one file's bytes are this round: ``url`` (None: ``error``, or ``wait``), fetched by aria2
    unless ``direct`` (the source's own ``download``)."""

    url: str | None
    direct: bool = False
    error: str | None = None
    retry_after: float = 0.0
    # unix time after which the (signed) URL stops working; None when it does not say
    expires: float | None = None
    # more URIs of the same bytes (peers: aria2 mirrors) and the header for them all (a peer's token)
    mirrors: tuple[str, ...] = ()
    header: str | None = None
    # where the bytes come from: "hub" or "peer:<name>" (the result's per-file source)
    origin: str = "hub"
    # not a failure: the file is not published yet and its owner is still fetching it (no try used)
    wait: bool = False
    # no later round can fetch it either (e.g. no Hub access and no peer holds it): fail it now
    final: bool = False


class HubSource(object):
    """The Hub's resolve endpoint: a HEAD per file, the token to the endpoint only.

    aria2 gets the (signed) URL the endpoint redirects to, never the token with it. A file the
    endpoint serves itself to a token holder (no redirect: small files of gated repos) is ``direct``:
    fetched here, without following redirects, so the token goes only to the endpoint (aria2 would
    resend an Authorization header to wherever a redirect of its GET points).
    """

    def __init__(self, *, endpoint: str, repo_id: str, repo_type: str, commit: str, token: str | None,
                 use_token: bool, timeout: float, opener: Any) -> None:
        self.endpoint = endpoint
        self.repo_id = repo_id
        self.repo_type = repo_type
        self.commit = commit
        self.token = token
        self.timeout = timeout
        self.opener = opener
        # The listing decides first; a resolve refused without the token turns it on for good.
        self.send_token = bool(token) and use_token

    def _head(self, item: _snapshot_plan.Item) -> tuple[_snapshot_plan.Item, Any, Exception | None]:
        try:
            return item, _hub.resolve_file(
                self.opener, self.endpoint, self.repo_id, self.commit, item.remote.path,
                token=self.token if self.send_token else None, repo_type=self.repo_type, timeout=self.timeout,
            ), None
        except (_hub.HubHTTPError, OSError, ValueError, http.client.HTTPException) as exc:
            return item, None, exc

    def _head_all(self, items: Sequence[_snapshot_plan.Item]) -> list:
        with ThreadPoolExecutor(max_workers=RESOLVE_THREADS) as pool:
            answers = list(pool.map(self._head, items))
            refused = [a[0] for a in answers if getattr(a[2], "status", None) in (401, 403)]
            if refused and self.token and not self.send_token:
                # a gated or private repo: from now on the token goes along (to the endpoint only)
                self.send_token = True
                again = {a[0].key: a for a in pool.map(self._head, refused)}
                answers = [again.get(a[0].key, a) for a in answers]
        return answers

    def _fatal(self, item: _snapshot_plan.Item, exc: Exception) -> SnapshotError | None:
        status = getattr(exc, "status", None)
        message = getattr(exc, "message", exc)
        if status in (401, 403):
            return SnapshotError("the Hub refused %s of %s (%s): %s" % (
                item.remote.path, self.repo_id, message,
                "the token has no access to this gated/private repo; request access or use another token"
                if self.send_token else "gated or private repo: set token (or HF_TOKEN on the host)",
            ), status=status)
        if status == 404:
            return SnapshotError("%s is listed in %s@%s but the Hub answers 404 for it: %s"
                                 % (item.remote.path, self.repo_id, self.commit, message))
        return None

    def resolve(self, items: Sequence[_snapshot_plan.Item]) -> list[tuple[_snapshot_plan.Item, Resolution]]:
        out = []
        for item, url, exc in self._head_all(items):
            if exc is not None:
                fatal = self._fatal(item, exc)
                if fatal is not None:
                    raise fatal
                out.append((item, Resolution(None, error="resolve: %s" % (getattr(exc, "message", None) or exc),
                                             retry_after=getattr(exc, "retry_after", None) or 0.0)))
                continue
            if url.sha256 and item.remote.lfs and item.remote.sha256 and url.sha256 != item.remote.sha256:
                raise SnapshotError("the Hub's listing and its resolve answer disagree on %s's sha256 (%s vs %s)"
                                    % (item.remote.path, item.remote.sha256, url.sha256))
            out.append((item, Resolution(url.url, direct=url.direct and self.send_token, expires=url.expires)))
        return out

    def download(self, url: str, out_path: str, size: int | None = None) -> None:
        try:
            _transfer_direct.download_direct(self.opener, url, out_path, token=self.token, timeout=self.timeout,
                                             size=size)
        except _transfer_direct.LocalWriteError:
            raise  # the disk's error, not the endpoint's: no retry fixes it
        except _hub.HubHTTPError as exc:
            raise SourceError("GET: %s" % exc.message, exc.retry_after or 0.0)
        except (OSError, http.client.HTTPException) as exc:
            # a reset, a timeout, a chunked body cut short (IncompleteRead), a garbled status line
            raise SourceError("GET: %s: %s" % (type(exc).__name__, exc))


class Transfer(object):
    """Fetch ``items`` (plan.Items) into staging and place each once verified.

    Items with the same content key travel once; the others are hard-linked from the first.
    ``progress`` needs ``write(state=..., message=...)``, ``timings`` ``took(phase, since)``.
    """

    def __init__(self, items: Sequence[_snapshot_plan.Item], *, dest: str, source: Any, aria2: _aria2.Aria2Settings,
                 max_tries: int, retry_wait: float, hash_workers: int | None, progress: Any, timings: Any,
                 log: Callable[[str], None]) -> None:
        self.dest = dest
        self.staging = _snapshot_staging.staging_dir(dest)
        self.source = source
        self.aria2 = aria2
        self.max_tries = max(1, max_tries)
        self.retry_wait = retry_wait
        self.hash_workers = hash_workers
        self.progress = progress
        self.timings = timings
        self.log = log
        self.by_key: dict[str, list[_snapshot_plan.Item]] = {}
        for item in items:
            self.by_key.setdefault(item.key, []).append(item)
        self.pending = {key: group[0] for key, group in self.by_key.items()}
        self.errors: dict[str, str] = {}
        # Tries are counted per file: a file waiting for its peer owner uses none while others fail.
        self.tries: dict[str, int] = {}
        self.given_up: dict[str, _snapshot_plan.Item] = {}
        # content key -> "hub" or "peer:<name>", for the files a download of this run placed
        self.origins: dict[str, str] = {}
        # content key -> the sources (provenance()) whose bytes its staging file holds, as this run wrote it
        self.partial_from: dict[str, tuple[str, ...]] = {}
        # content keys whose staging file held bytes of an earlier run when this run first fetched it
        self.inherited: set[str] = set()

    def run(self) -> dict[str, str]:
        """Fetch; returns {path: last error} of the files that could not be fetched."""
        _snapshot_staging.make_staging(self.dest)
        while True:
            self._take_leftovers()
            if not self.pending:
                break
            rnd = _Round(self)
            wait_hint = rnd.run()
            failing = [key for key in rnd.failed_keys if key in self.pending]
            for key in failing:
                if key in rnd.excused_keys and key not in rnd.final_keys:
                    # a peer's fault, and that peer is dropped (or the file now goes one peer at a time):
                    # no try used, so a small max_tries still reaches the other peers and the Hub last
                    continue
                self.tries[key] = self.tries.get(key, 0) + 1
                if self.tries[key] >= self.max_tries or key in rnd.final_keys:
                    self.given_up[key] = self.pending.pop(key)
            if not self.pending:
                break
            retrying = [key for key in failing if key in self.pending and key not in rnd.excused_keys]
            if retrying:
                self._pause(max(self.tries[key] for key in retrying), wait_hint)
            elif any(key in self.pending for key in failing):
                pass  # only excused failures: the next round asks other peers (or the Hub) at once
            elif rnd.waiting:
                # files not published yet by their owner: a short pause, then ask the peers again
                self.source.pause()
            else:
                break  # nothing failed, nothing waits, yet files remain: never spin
        left = list(self.given_up.values()) + list(self.pending.values())
        failed = {item.remote.path: self.errors.get(item.remote.path, "not fetched") for item in left}
        self._link_duplicates(failed)
        return failed

    def start_clean_unless_same(self, item: _snapshot_plan.Item, res: Resolution) -> None:
        """Before ``item`` is fetched from ``res``: discard a partial another source set wrote (item 7
        of issue 20), so this source is never resumed on, nor blamed for, another's bytes."""
        staged = self.staged(item)
        parts = (staged, staged + ".aria2", staged + _snapshot_staging.DIRECT_MARK)
        tag = provenance(res)
        before = self.partial_from.get(item.key)
        if not any(os.path.lexists(path) for path in parts):
            self.inherited.discard(item.key)
        elif before is None:
            self.inherited.add(item.key)  # left by an earlier run: resumed, but a mismatch blames nobody
        elif before != tag:
            _snapshot_staging.remove(*parts)
            self.inherited.discard(item.key)
            item.resumed = False
            self.log("%s: discarded the partial bytes of %s before fetching it from %s"
                     % (item.remote.path, ", ".join(before), ", ".join(tag)))
        self.partial_from[item.key] = tag

    def staged(self, item: _snapshot_plan.Item) -> str:
        # Keys are checked where the listing enters (_hub); containment here too, as everywhere a
        # path is built from remote data.
        return _paths.dest_path(self.staging, item.key)

    def placed(self, item: _snapshot_plan.Item) -> None:
        """``item``'s verified staging file goes to its final path; it is done."""
        _snapshot_staging.place(item, self.staged(item), self.dest)
        # a direct download's mark, when aria2 (or a leftover check) finished its file after all
        _snapshot_staging.remove(self.staged(item) + _snapshot_staging.DIRECT_MARK)
        self.pending.pop(item.key, None)
        self.errors.pop(item.remote.path, None)
        self.partial_from.pop(item.key, None)
        self.inherited.discard(item.key)

    def _take_leftovers(self) -> None:
        # Before every round: what an earlier (possibly killed) aria2 left must not be taken on trust.
        for first in list(self.pending.values()):
            if _snapshot_staging.settle_leftover(first, self.staged(first)):
                self.placed(first)

    def _pause(self, attempt: int, wait_hint: float) -> None:
        wait = min(MAX_RETRY_AFTER, max(wait_hint, backoff(self.retry_wait, attempt)))
        self.log("%d file(s) not done after try %d/%d, next try in %.0f s" % (len(self.pending), attempt, self.max_tries, wait))
        # the errors quote what servers said: never the token in progress.json, whatever they echo
        self.progress.write(message=_secrets.mask("retrying %d file(s) in %.0f s: %s" % (
            len(self.pending), wait, "; ".join("%s: %s" % kv for kv in sorted(self.errors.items())[:3])),
            getattr(self.source, "token", None), getattr(self.source, "peer_token", None)))
        time.sleep(wait)

    def _link_duplicates(self, failed: dict[str, str]) -> None:
        # Same bytes under several paths: the first was fetched, the others are hard links to it.
        for group in self.by_key.values():
            first = group[0]
            for other in group[1:]:
                if first.stat is None:
                    failed[other.remote.path] = failed.get(first.remote.path, "not fetched")
                else:
                    _snapshot_staging.link_duplicate(first, other, self.staging, self.dest)


def provenance(res: Resolution) -> tuple[str, ...]:
    """Who writes a file's bytes when it is fetched from ``res``: the Hub (its signed URLs change on
    every resolve, the Hub stays the Hub), or exactly these peer URIs (aria2 mirrors)."""
    if res.origin == "hub":
        return ("hub",)
    return tuple(sorted((res.url or "",) + tuple(res.mirrors)))


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


class _Round(object):
    """One pass over the pending files, batch by batch: resolve, one aria2c, settle each file."""

    def __init__(self, transfer: Transfer) -> None:
        self.t = transfer
        self.wait_hint = 0.0  # what the servers asked us to wait before the next round
        self.batch: dict[str, _snapshot_plan.Item] = {}
        self.hashes: dict[str, Any] = {}
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
        for chunk in batches(list(self.t.pending.values()), self.t.aria2.parallel_files):
            self._batch(chunk)
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

    def _aria2(self, batch: list[tuple[_snapshot_plan.Item, str]]) -> None:
        t = self.t
        # No checksum= for aria2: it would hash in its single thread after the transfer.
        jobs = [_aria2.Aria2File(item.key, url, t.staging, item.key, None, item.remote.size,
                                 self.res[item.key].mirrors, self.res[item.key].header) for item, url in batch]
        self.batch = {item.key: item for item, url in batch}
        self.hashes = {}
        self.pool = ThreadPoolExecutor(max_workers=t.hash_workers or _hashing.default_workers())
        mark = time.monotonic()
        try:
            result = _aria2.run(
                jobs, os.path.join(t.staging, _snapshot_staging.ARIA2_WORKDIR), t.aria2,
                tick=t.progress.write, tick_interval=PROGRESS_INTERVAL, on_complete=self._hash_later)
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
