# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The run's claim on a host's peer-status (hf_snapshot's ``peer_claim`` and ``peer_run``).

Private to the collection: not a public API, may change without notice.

Before any host of a run fetches a model, every host writes ``{"state": "started", "run": <run id>}``
as its peer-status of that model (the model role's claim task). A peer that then reads no status of
this run from a host (``_peers.PeerSource.refresh_status`` with the run id) counts it gone at once:
that host failed or was unreachable before its claim, or its claim failed. Neither write ever replaces
a status a live run writes: a run writes its status only while it holds the directory lock, so these
take the lock without waiting, and a failure turns only this run's own "started" into "failed".
"""

from __future__ import annotations

import json
import os
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._common import paths as _paths
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peerbook as _peerbook
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peers as _peers
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.settings import Settings


def claim_status(dest: str, run: str, *, state: str = "started", only_over: str | None = None) -> bool:
    """Write ``state`` of run ``run`` as dest's peer-status, never over a status a live run writes.

    A run writes its status only while it holds dest's lock, so this takes the lock without waiting: held,
    it raises LockTimeout (the live run's status stays). A symlinked ``.gpufleet`` raises LockRefused and
    nothing is written. ``only_over``: write only when the status there is ``only_over`` of this same run
    (a compare-and-swap on the run id: "failed" replaces this run's "started" claim, nothing else); False
    when it did not write."""
    _manifest.refuse_symlinked_meta(dest, "hf_snapshot", names=(_manifest.LOCK, _peerbook.STATUS_FILE))
    with _manifest.DirLock(dest, timeout=0, option=None):
        if only_over is not None:
            try:
                with open(os.path.join(_manifest.meta_dir(dest), _peerbook.STATUS_FILE), "rb") as handle:
                    now = json.loads(handle.read(_peerbook.MAX_STATUS_BYTES).decode("utf-8"))
            except (OSError, ValueError):
                return False
            if not isinstance(now, dict) or now.get("state") != only_over or now.get("run") != run:
                return False
        _peers.write_status(dest, state, run=run)
    return True


def claim(settings: Settings, *, check_mode: bool = False) -> dict[str, Any]:
    """peer_claim: dest's peer-status says "started" for run peer_run, written before the fetch starts (the
    model role runs this on every host before any of them fetches). A peer that then reads no status of
    this run from a host counts it gone at once. Refused, naming the reason, when ``.gpufleet`` is a
    symlink or another run holds dest's lock (a live run's status stays): the host fails here, before
    its fetch, and its peers stop waiting for it. Proves on the way that the module starts on this host."""
    if not settings.peer_run:
        raise SnapshotError("peer_claim needs peer_run (the id of this run's peer exchange)")
    if not check_mode:
        try:
            _paths.make_dirs(settings.dest)  # 0755 whatever the umask, as the fetch makes it
            claim_status(settings.dest, settings.peer_run)
        except _manifest.SymlinkedMetaError as exc:
            raise SnapshotError(str(exc))
        except _manifest.LockTimeout as exc:
            raise SnapshotError("cannot tell the peers this host's fetch of %s starts: %s (its status stays that run's)"
                                % (settings.repo_id, exc))
    return {"changed": False, "claimed": settings.peer_run, "dest": settings.dest,
            "msg": "%s: peer-status of run %s %s started" % (settings.dest, settings.peer_run, "would say" if check_mode else "says")}


def claimed_run_failed(settings: Settings | None, not_a_fetch: bool) -> None:
    """A fetch of run peer_run that failed before it held the lock (listing, checks) turns this run's
    "started" claim into "failed", so its peers take its share from the Hub at once; a compare-and-swap on
    the run id: never over another run's status, never while a live run holds the lock. Best effort."""
    if settings is None or not_a_fetch or not settings.peer_run or settings.peers is None:
        return
    try:
        claim_status(settings.dest, settings.peer_run, state="failed", only_over="started")
    except (OSError, _manifest.LockTimeout, _manifest.SymlinkedMetaError):
        pass
