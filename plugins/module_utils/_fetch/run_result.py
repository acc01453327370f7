# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hf_snapshot's result: a row per file, the bytes per source, the figures of the run.

Private to the collection: not a public API, may change without notice.

``RunResult`` is the part of a ``snapshot.Run`` that answers: when the run started (its duration), which
paths moved no bytes of their own (``duplicates``), which peers it dropped, and the result dict built
from the rows the run's steps give it (``result``, ``listed`` for resolve_only).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _plan
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.progress import Timings
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.settings import Settings


def row(item: _plan.Item, action: str, source: str | None = None) -> dict[str, Any]:
    """A file's row of the result: its path, size, what this run did with it, and where its bytes came from."""
    out = {"path": item.remote.path, "size": item.remote.size, "action": action}
    if source is not None:
        out["source"] = source
    return out


def source_of(item: _plan.Item, origins: Mapping[str, str], failed: Mapping[str, str]) -> str | None:
    """Where a placed file's bytes came from: a download of this run (hub, peer:<name>), a link, or
    already there (present, also bytes an earlier run left verified in staging); None when it failed."""
    if item.remote.path in failed:
        return None
    if item.action in ("present", "link"):
        return item.action
    return origins.get(item.key, "present")


def same_bytes(items: Sequence[_plan.Item]) -> set[str]:
    """Paths to fetch whose bytes travel with an earlier path of the same content (the transfer
    fetches each content key once and hard-links the rest): not counted again in the bytes per source."""
    seen: set[str] = set()
    out: set[str] = set()
    for item in items:
        if item.action != "fetch":
            continue
        if item.key in seen:
            out.add(item.remote.path)
        seen.add(item.key)
    return out


def source_bytes(rows: Sequence[Mapping[str, Any]], duplicates: set[str] | frozenset = frozenset()) -> dict[str, Any]:
    """bytes_from_hub, bytes_from_peers, from_peers of ``rows``; a path in ``duplicates`` moved no bytes."""
    from_peers: dict[str, int] = {}
    hub = 0
    for entry in rows:
        if entry["path"] in duplicates:
            continue
        source = entry.get("source") or ""
        if source == "hub":
            hub += entry["size"]
        elif source.startswith("peer:"):
            from_peers[source[5:]] = from_peers.get(source[5:], 0) + entry["size"]
    return {"bytes_from_hub": hub, "bytes_from_peers": sum(from_peers.values()), "from_peers": from_peers}


def done_action(item: _plan.Item, failed: Mapping[str, str]) -> str:
    """What this run did with a file it placed (or could not): failed, present, linked, resumed, fetched."""
    if item.remote.path in failed:
        return "failed"
    if item.action == "present":
        return "present"
    if item.action == "link":
        return "linked"
    return "resumed" if item.resumed else "fetched"


class RunResult(object):
    """What a run answers; ``started`` when the run did (the result's duration counts from there)."""

    def __init__(self, settings: Settings, *, check_mode: bool, timings: Timings) -> None:
        self.settings = settings
        self.dest = settings.dest
        self.check_mode = check_mode
        self.timings = timings
        self.started = time.monotonic()
        self.dropped: list[dict[str, str]] = []
        # paths whose bytes travel with another path of the same content (counted once per source)
        self.duplicates: set[str] = set()

    def listed(self, items: Sequence[_plan.Item], *, commit: str | None) -> dict[str, Any]:
        """resolve_only: the revision's files as a listing another run can take (``listing``)."""
        # sha256 and blob_id: what another run needs to take this listing as its ``listing``
        rows = [dict(row(item, "listed"), sha256=item.remote.sha256, blob_id=item.remote.blob_id) for item in items]
        res = self.result(rows, commit=commit, fetched_bytes=0, strays=[], pruned=[], changed=False)
        res["resolve_only"] = True
        return res

    def result(self, rows: list[dict[str, Any]], *, commit: str | None, fetched_bytes: int, strays: list[dict[str, Any]],
               pruned: list[str], changed: bool, offline: bool = False) -> dict[str, Any]:
        duration = time.monotonic() - self.started
        return {
            "changed": bool(changed),
            "repo_id": self.settings.repo_id,
            "revision": self.settings.revision,
            "commit": commit,
            "dest": self.dest,
            "files": rows,
            "bytes_fetched": fetched_bytes,
            "bytes_total": sum(r["size"] for r in rows),
            "duration": round(duration, 3),
            "throughput_mib_s": round(fetched_bytes / duration / 2**20, 1) if duration > 0 and fetched_bytes else 0.0,
            "stray": strays,
            "pruned": pruned,
            "manifest": os.path.join(_manifest.meta_dir(self.dest), _manifest.MANIFEST),
            "offline": offline,
            "check_mode": self.check_mode,
            "timings": self.timings.as_dict(),
            **self.sources(rows),
        }

    def sources(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Bytes per source of the files this run placed (the check-mode plan: where they would come from)."""
        return dict(source_bytes(rows, self.duplicates), peers_dropped=list(self.dropped))
