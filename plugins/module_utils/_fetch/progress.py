# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What an operator sees of a fetch while and after it runs: progress.json and the result's timings.

Private to the collection: not a public API, may change without notice.

Bytes done are counted from the staging files' allocated blocks (aria2 runs with
``--file-allocation=none``), so the figure does not depend on aria2's console format.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import strays as _strays

PROGRESS = "progress.json"
# How often progress.json is rewritten while aria2 runs, seconds.
PROGRESS_INTERVAL = 2.0
# The rate is measured over this many seconds: long enough to smooth aria2's bursts, short enough
# that the ETA follows a link that slowed down.
RATE_WINDOW = 20.0


def human(nbytes: float) -> str:
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return ("%d %s" % (value, unit)) if unit == "B" else ("%.1f %s" % (value, unit))
        value /= 1024.0
    return "%d B" % nbytes  # pragma: no cover


class Timings(object):
    """Seconds per phase of one run (list, plan, resolve, aria2, ...), for the result's ``timings``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.phases: dict[str, float] = {}

    def took(self, phase: str, since: float) -> float:
        """Add the seconds since ``since`` to ``phase``; returns now (the next phase's start)."""
        now = self.clock()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - since
        return now

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in sorted(self.phases.items())}


class Progress(object):
    """``<dest>/.gpufleet/progress.json``: bytes done, rate and ETA while aria2 runs.

    ``items`` are the files being fetched (plan.Item: ``remote``, ``key``, ``stat``); a file with a
    stat record is placed and counts whole, any other counts what its staging file holds.
    """

    def __init__(self, dest: str, *, staging: str, repo_id: str, commit: str, items: Sequence[Any] = (),
                 check_mode: bool = False, clock: Callable[[], float] = time.time) -> None:
        self.path = os.path.join(_manifest.meta_dir(dest), PROGRESS)
        self.staging = staging
        self.repo_id = repo_id
        self.commit = commit
        self.enabled = not check_mode
        self.clock = clock
        self.started = clock()
        self.items: list[Any] = []
        self.total = 0
        self.base: int | None = None
        self.window: list[tuple[float, int]] = []
        self.track(items)

    def track(self, items: Sequence[Any]) -> None:
        """Count these items (one per content key) from now on."""
        self.items = list(items)
        self.total = sum(it.remote.size for it in self.items)

    def bytes_done(self) -> int:
        done = 0
        for item in self.items:
            if item.stat is not None:
                done += item.remote.size
            else:
                done += min(item.remote.size, _strays.allocated_bytes(os.path.join(self.staging, item.key)))
        return done

    def _rate(self, now: float, done: int) -> float:
        self.window.append((now, done))
        self.window = [w for w in self.window if now - w[0] <= RATE_WINDOW] or [(now, done)]
        t0, d0 = self.window[0]
        return (done - d0) / (now - t0) if now - t0 >= 0.5 else 0.0

    def write(self, state: str = "running", message: str | None = None) -> dict[str, Any] | None:
        """Rewrite progress.json (atomically; a failed write only loses this update); returns its data."""
        if not self.enabled:
            return None
        now = self.clock()
        done = self.bytes_done()
        if self.base is None:
            self.base = done
        rate = self._rate(now, done)
        eta = (max(0, self.total - done) / rate) if rate > 0 else None
        files_done = sum(1 for it in self.items if it.stat is not None)
        line = message or "%s: %s / %s (%.0f%%), %s/s, ETA %s, %d/%d files" % (
            self.repo_id, human(done), human(self.total), 100.0 * done / self.total if self.total else 100.0,
            human(rate), ("%ds" % eta) if eta is not None else "?", files_done, len(self.items),
        )
        data = {
            "format": 1,
            "state": state,
            "repo_id": self.repo_id,
            "commit": self.commit,
            "bytes_total": self.total,
            "bytes_done": done,
            "bytes_this_run": done - self.base,
            "rate_bytes_s": round(rate, 1),
            "eta_s": round(eta, 1) if eta is not None else None,
            "files_total": len(self.items),
            "files_done": files_done,
            "started_at": round(self.started, 3),
            "updated_at": round(now, 3),
            "elapsed_s": round(now - self.started, 1),
            "line": line,
        }
        try:
            _manifest.atomic_write_json(self.path, data)
        except OSError:
            pass
        return data
