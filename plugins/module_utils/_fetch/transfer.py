# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fetching files into staging and placing them once verified: a URL source, aria2, our own hashes.

Private to the collection: not a public API, may change without notice.

``Transfer`` fetches a set of plan.Items (each knows its size and the Hub's id for its bytes) into
``<dest>/.gpufleet/staging/`` and renames each to its final path once its hash matched. It works in
rounds (``rounds.Round``) over the pending files, batch by batch (``rounds.batches``: as many large
files as aria2 fetches at once, small ones riding along): resolve the batch's files to URLs through a
*source* just before the batch starts, so a signed URL is never minutes old when aria2 first uses
it; fetch with one aria2c per batch, place each file as soon as aria2 finished it and its hash matched
(while the batch's others still download), then settle each file by aria2's outcome (a peer source's
rounds run in lanes instead: ``rounds.Round._run_lanes``, a slot filled as soon as a file completes). A failed file is
retried in the next round with a fresh URL, after a backoff that honours the servers' Retry-After.

A source is what ``source`` describes (``resolve``, ``download``, and optionally ``settled``,
``credited``, ``pause``, ``dropped``, ``placed``). ``HubSource`` is the Hub's ``/resolve/`` endpoint;
``peers.PeerSource`` the other hosts of a fleet, the Hub last. Each file is hashed once, in a thread
pool, as soon as aria2's log says it is complete, while the other files still download.

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
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import aria2 as _aria2
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._common import paths as _paths
from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _snapshot_plan
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _snapshot_staging
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import direct as _transfer_direct
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError, backoff
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.rounds import Round
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.source import Resolution, SourceError, provenance

# A server's Retry-After is honoured up to this many seconds.
MAX_RETRY_AFTER = 600.0
# Parallel HEADs per round: resolving is latency, not bandwidth.
RESOLVE_THREADS = 8


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
            rnd = Round(self)
            wait_hint = rnd.run()
            failing = self._count_tries(rnd)
            if not self.pending or not self._next_round_due(rnd, failing, wait_hint):
                break
        left = list(self.given_up.values()) + list(self.pending.values())
        failed = {item.remote.path: self.errors.get(item.remote.path, "not fetched") for item in left}
        self._link_duplicates(failed)
        return failed

    def _count_tries(self, rnd: Round) -> list[str]:
        """The round's failed files still pending, each charged a try unless excused; a file out of
        tries (or that no later round can fetch) is given up."""
        failing = [key for key in rnd.failed_keys if key in self.pending]
        for key in failing:
            if key in rnd.excused_keys and key not in rnd.final_keys:
                # a peer's fault, and that peer is dropped (or the file now goes one peer at a time):
                # no try used, so a small max_tries still reaches the other peers and the Hub last
                continue
            self.tries[key] = self.tries.get(key, 0) + 1
            if self.tries[key] >= self.max_tries or key in rnd.final_keys:
                self.given_up[key] = self.pending.pop(key)
        return failing

    def _next_round_due(self, rnd: Round, failing: Sequence[str], wait_hint: float) -> bool:
        """With files still pending after ``rnd``: wait as it calls for, then True; False when no next
        round can change anything (nothing failed, nothing waits, yet files remain: never spin)."""
        left = [key for key in failing if key in self.pending]
        retrying = [key for key in left if key not in rnd.excused_keys]
        if retrying:
            self._pause(max(self.tries[key] for key in retrying), wait_hint)
            return True
        if left:
            return True  # only excused failures: the next round asks other peers (or the Hub) at once
        if rnd.waiting:
            # files not published yet by their owner: a short pause, then ask the peers again
            self.source.pause()
            return True
        return False

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
        on_placed = getattr(self.source, "placed", None)
        if on_placed is not None:
            # a peer source lists it in this host's peer-status: served from now on (maybe while its
            # aria2c still runs; the source's credited and settled come once it has ended)
            on_placed(item)

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
