# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Files a source's own endpoint serves (``direct``): fetched in-process, several at once, beside aria2.

Private to the collection: not a public API, may change without notice.

A token-protected endpoint that answers a file's GET itself (no redirect) must get the token, and
must get it alone: aria2 resends every ``--header``/``header=`` to wherever a redirect points
(aria2/aria2#1176) and has no option to refuse redirects (aria2/aria2#302), so a token handed to
aria2 would reach a third host the moment the endpoint redirected a GET. These files are therefore
downloaded by the source in worker threads (redirects refused, the token an unredirected header),
up to ``parallel_files`` at once and while the batch's aria2c runs, so a gated repo's small files
never hold its large ones back. The caller's thread alone places files and keeps the books.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, NamedTuple

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub


class DirectResult(NamedTuple):
    """What one direct download came to: the sha256 of verified bytes, or the error of this round."""

    digest: str | None
    error: str | None = None
    retry_after: float = 0.0


class DirectFetches(object):
    """Direct downloads in a thread pool: ``start`` them, do other work, then ``wait`` for them.

    ``fetch(item, url) -> DirectResult`` runs in a worker: it downloads and verifies, and must not
    touch shared state (placing a file changes the Transfer's pending set).
    """

    def __init__(self, fetch: Callable[[Any, str], DirectResult], *, workers: int) -> None:
        self.fetch = fetch
        self.workers = max(1, workers)
        self.pool: ThreadPoolExecutor | None = None
        self.futures: list[tuple[Any, Future]] = []

    def start(self, jobs: Sequence[tuple[Any, str]]) -> None:
        if not jobs:
            return
        self.pool = ThreadPoolExecutor(max_workers=min(self.workers, len(jobs)), thread_name_prefix="direct")
        self.futures = [(item, self.pool.submit(self.fetch, item, url)) for item, url in jobs]

    def done(self) -> bool:
        """True once every download started has ended (at once when none was started)."""
        return all(future.done() for dummy, future in self.futures)

    def wait(self, tick: Callable[[], Any], interval: float) -> list[tuple[Any, DirectResult]]:
        """Every download's result, in ``start`` order; ``tick`` every ``interval`` seconds until then.

        The progress file counts staging bytes, so ticking while a direct file grows shows it moving
        (aria2's own tick covers the time aria2 runs). A worker's unexpected exception is raised here.
        """
        pending = {future for dummy, future in self.futures}
        while pending:
            dummy, pending = wait(pending, timeout=interval)
            if pending:
                tick()
        return [(item, future.result()) for item, future in self.futures]

    def close(self) -> None:
        """Drop downloads not started yet and let running ones end (each read is bounded by the
        source's timeout): no worker outlives the round, even when it ends by an exception."""
        if self.pool is None:
            return
        for dummy, future in self.futures:
            future.cancel()
        self.pool.shutdown(wait=True)
        self.pool = None


class LocalWriteError(OSError):
    """Writing downloaded bytes to disk failed (full, read-only, permissions): no retry fixes that."""


def download_direct(opener, url, out_path, *, token=None, timeout=60.0, size=None, chunk=1 << 20):
    """GET ``url`` from the endpoint itself into ``out_path``, resuming an existing prefix by Range.

    For bytes the endpoint serves without a redirect when a token is needed (gated/private repos'
    small files): the token then goes to the endpoint only, in-process, never to aria2. Redirects
    are not followed. ``size``: the listing's size; a body longer than that is cut and refused (a
    hostile endpoint cannot fill the disk). A prefix the answer does not continue (a 206 from
    another offset, a 416 short of ``size``) is removed, so the next try starts over. Raises
    HubHTTPError for the endpoint's answers, LocalWriteError for the disk's. Returns the number of
    body bytes received. Thread-safe (one request, one file).
    """
    have = os.path.getsize(out_path) if os.path.exists(out_path) else 0
    if size is not None and have > size:
        have = 0  # longer than the file can be: not a prefix of it
    headers = {"User-Agent": _hub.USER_AGENT, "Accept-Encoding": "identity"}
    if have:
        headers["Range"] = "bytes=%d-" % have
    req = urllib.request.Request(url, headers=headers)
    if token:
        req.add_unredirected_header("Authorization", "Bearer %s" % token)
    try:
        resp = opener.open(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have and (size is None or have >= size):
            return 0  # already whole; the caller's hash decides
        if exc.code == 416 and have:
            _drop(out_path)
            raise _hub.HubHTTPError(416, "416: the endpoint refused the rest of the file from byte %d; the next try "
                                         "starts over" % have, url=url)
        if 300 <= exc.code < 400:
            raise _hub.HubHTTPError(exc.code, "%d: the endpoint redirected the GET after answering its HEAD itself; "
                                              "not followed (the token would go along), re-resolved next try" % exc.code,
                                    url=url)
        raise _hub.HubHTTPError(exc.code, _hub.error_message(exc), _hub.retry_after_seconds(exc.headers.get("Retry-After")),
                                url=url)
    with resp:
        start = _resume_offset(resp, have, out_path, url)
        return _write_body(resp, out_path, start=start, size=size, chunk=chunk)


def _drop(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _resume_offset(resp, have, out_path, url):
    """Where the body goes in ``out_path``: ``have`` for a 206 that continues the prefix, 0 for a 200."""
    if not have or resp.status != 206:
        return 0
    match = re.match(r"^\s*bytes\s+(\d+)-", resp.headers.get("Content-Range") or "")
    if not match or int(match.group(1)) != have:
        _drop(out_path)
        raise _hub.HubHTTPError(206, "206 for bytes %s, asked from byte %d: the next try starts over"
                                % (_hub.shown(resp.headers.get("Content-Range")), have), url=url)
    return have


def _write_body(resp, out_path, *, start, size, chunk):
    received = 0
    # read1 + flush: the staging file (what progress counts) grows as bytes arrive, not by 1 MiB steps
    read = getattr(resp, "read1", resp.read)
    try:
        handle = open(out_path, "ab" if start else "wb")
    except OSError as exc:
        raise LocalWriteError(exc.errno, exc.strerror, exc.filename) from exc
    with handle:
        while True:
            data = read(chunk)
            if not data:
                break
            if size is not None and start + received + len(data) > size:
                handle.close()
                _drop(out_path)
                raise _hub.HubHTTPError(200, "the body is longer than the listing's %d bytes: refused" % size)
            try:
                handle.write(data)
                handle.flush()
            except OSError as exc:
                raise LocalWriteError(exc.errno, exc.strerror, out_path) from exc
            received += len(data)
    return received
