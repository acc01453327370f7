# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the transfer asks of a source of bytes: the Source interface, its answers and its errors.

Private to the collection: not a public API, may change without notice.

A source (``transfer.HubSource``, ``peers.PeerSource``) is any object with

- ``resolve(items) -> [(item, Resolution)]``: a URL per item, or the error of this round; raises
  SnapshotError for what no retry can fix;
- optionally ``settled(item, resolution, uri_errors=, mismatch=, failed=) -> bool``: after aria2, what each of
  its URIs did; True when the file's failure was a URI the source no longer uses (a dropped peer), or
  a peer's passing fault: that round uses none of the file's ``max_tries``;
- optionally ``credited(resolution, uri_errors) -> str``: the origin a file aria2 finished is credited
  to (of several mirrors, one that served it to the end, not one that failed on the way);
- ``download(url, out_path, size)``: fetch a URL the source marked ``direct`` (bytes the source's own
  endpoint serves, with its credentials), raising SourceError; called from several threads at once
  (``direct``: up to ``parallel_files`` direct files, while the batch's aria2c runs);
- ``pause()`` when it answered ``wait`` for some files (their owner still fetches them), and optionally
  ``dropped()``, the peers it stopped using, for the result, and ``placed(item)``, told once a file is
  verified and in place (a peer source lists it in this host's peer-status): for a file aria2 fetched,
  as soon as its hash matched, while aria2 may still fetch the batch's others, so before the file's
  ``credited`` and ``settled`` (which need aria2's final word on every URI, and still come for it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol


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


class Source(Protocol):
    """The part of the interface every source has (see the module's docstring for the optional part)."""

    def resolve(self, items: Sequence[Any]) -> list[tuple[Any, Resolution]]:
        """A Resolution per item: a URL, a wait, or this round's error; SnapshotError for what no retry fixes."""

    def download(self, url: str, out_path: str, size: int | None = None) -> None:
        """Fetch a ``direct`` URL into ``out_path``, resuming what is there; SourceError when it failed."""


def provenance(res: Resolution) -> tuple[str, ...]:
    """Who writes a file's bytes when it is fetched from ``res``: the Hub (its signed URLs change on
    every resolve, the Hub stays the Hub), or exactly these peer URIs (aria2 mirrors)."""
    if res.origin == "hub":
        return ("hub",)
    return tuple(sorted((res.url or "",) + tuple(res.mirrors)))
