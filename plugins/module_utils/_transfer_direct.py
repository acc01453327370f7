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

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, NamedTuple


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
