# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Applying a listed revision to dest: plan, preflight, then a check-mode preview or the landing.

Private to the collection: not a public API, may change without notice.

``RunApply`` is the apply step of a ``snapshot.Run``, once the listing gave the files: the plan
(present / link / fetch), the disk and aria2c preflight, then either what check mode would do, or the
links, the transfer (from the Hub or the peers), the manifest and the strays; its result comes from
the run's ``RunResult``, a failure is a SnapshotError naming each failed file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import aria2 as _aria2
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import strays as _strays
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peers as _peers
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import transfer as _transfer
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _plan
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import run_result as _run_result
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _staging
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.progress import Progress, Timings, human
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.run_listing import RunListing
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.settings import Settings

# What makes two manifests the same revision of the same selection (``written_at`` does not count).
MANIFEST_KEYS = ("repo_id", "repo_type", "revision", "commit", "endpoint", "files", "allow_patterns",
                 "ignore_patterns", "complete")


class RunApply(object):
    """The apply step of one run: what the listing gave, to dest (or, in check mode, what it would do)."""

    def __init__(self, settings: Settings, *, listing: RunListing, results: _run_result.RunResult,
                 peers: list[_peers.Peer] | None, hub_share: set[str] | None, aria2c_path: str | None,
                 check_mode: bool, log: Callable[[str], None], warn: Callable[[str], None], timings: Timings,
                 publish: Callable[[Sequence[tuple[str, int]]], None] | None = None) -> None:
        self.settings = settings
        # with peers: lists files in this host's peer-status as they are in place (they are served already)
        self.publish = publish
        self.dest = settings.dest
        self.staging = _staging.staging_dir(settings.dest)
        self.listing = listing
        self.results = results
        self.peers = peers
        self.hub_share = hub_share
        self.aria2c_path = aria2c_path
        self.check_mode = check_mode
        self.log = log
        self.warn = warn
        self.timings = timings

    @property
    def commit(self) -> str | None:
        return self.listing.commit

    def _own_manifest(self) -> dict[str, Any] | None:
        """The manifest already in dest (None when absent or unreadable); refuses another repo's."""
        try:
            manifest = _manifest.read_manifest(self.dest) if os.path.isdir(self.dest) else None
        except _manifest.ManifestError as exc:
            self.log("ignoring unreadable manifest: %s" % exc)
            manifest = None
        if manifest and (manifest.get("repo_id"), manifest.get("repo_type")) != (self.settings.repo_id, self.settings.repo_type):
            raise SnapshotError("%s holds %s (manifest), not %s: use another dest"
                                % (self.dest, manifest.get("repo_id"), self.settings.repo_id))
        return manifest

    def apply(self, items: list[_plan.Item]) -> dict[str, Any]:
        """Plan, check the disk and aria2c, then preview (check mode) or land the revision."""
        s = self.settings
        manifest = self._own_manifest()
        mark = time.monotonic()
        _plan.plan(items, manifest, link_from=s.link_from, workers=s.hash_workers)
        self.timings.took("plan", mark)
        to_fetch = _plan.unique_fetches(items)
        disk = _plan.disk_figures(self.dest, to_fetch=to_fetch, staging=self.staging, min_free_bytes=s.min_free_bytes,
                                  to_link=[item for item in items if item.action == "link"])
        blockers = []
        if disk["short_bytes"]:
            blockers.append(SnapshotError(self._no_space_message(len(to_fetch), disk), disk=disk))
        if to_fetch and not self.aria2c_path:
            blockers.append(SnapshotError("aria2c not found%s: install the aria2 package or set the aria2c option"
                                          % (" at %s" % s.aria2c if s.aria2c else " on PATH")))
        if blockers and not self.check_mode:
            raise blockers[0]
        if self.check_mode:
            # Check mode answers "what would this do": a run that would fail says why, with the figures,
            # instead of hiding the rest of the answer behind the first failure.
            for blocker in blockers:
                self.warn("check mode: a real run would fail: %s" % blocker.msg)
            return self._preview(items, to_fetch, disk, blocked=[b.msg for b in blockers])
        return self._land(items, disk)

    def _no_space_message(self, files: int, disk: Mapping[str, Any]) -> str:
        needed, free = disk["needed_bytes"], disk["free_bytes"]
        return (
            "not enough disk space for %s@%s in %s: %d file(s) to fetch need %s (%d bytes; hard links supply %s "
            "more) plus the %s headroom "
            "(min_free_bytes), but the filesystem of %s has %s (%d bytes) free; free space, use a bigger "
            "volume or lower min_free_bytes" % (
                self.settings.repo_id, self.commit[:12], self.dest, files, human(needed), needed,
                human(disk["linked_bytes"]), human(self.settings.min_free_bytes), disk["filesystem"], human(free), free,
            )
        )

    def _preview(self, items: Sequence[_plan.Item], to_fetch: Mapping[str, _plan.Item],
                 disk: dict[str, Any], *, blocked: list[str]) -> dict[str, Any]:
        """Check mode: what would be fetched or linked, and the disk figures; writes nothing."""
        wanted = {item.remote.path for item in items}
        strays = []
        if os.path.isdir(self.dest):
            strays = _strays.scan_strays(self.dest, wanted=wanted, staging=self.staging, staging_keys=set(to_fetch))
        changed = any(it.action != "present" for it in items) or (
            self.settings.prune_partials and any(s["kind"] == "partial" for s in strays))
        self.results.duplicates = _run_result.same_bytes(items)
        planned = {it.key: _peers.planned_source(it.remote.path, peers=self.peers or [], hub_share=self.hub_share)
                   for it in items if it.action == "fetch"}
        rows = [_run_result.row(it, it.action, _run_result.source_of(it, planned, {})) for it in items]
        res = self.results.result(rows, commit=self.commit, fetched_bytes=0, strays=strays, pruned=[], changed=changed)
        res["bytes_to_fetch"] = disk["needed_bytes"]
        res["disk"] = disk
        res["blocked"] = blocked
        return res

    def _link_or_fetch(self, items: Sequence[_plan.Item]) -> None:
        """Hard-link the items planned as links; one whose source no longer fits is fetched instead."""
        for item in items:
            if item.action == "link":
                _staging.make_staging(self.dest)
                if not _staging.link_from_source(item, self.staging, self.dest):
                    item.action = "fetch"

    def _new_transfer(self, fetching: Sequence[_plan.Item], progress: Progress) -> _transfer.Transfer:
        s = self.settings
        source: Any = None
        if s.hub:
            source = _transfer.HubSource(
                endpoint=s.endpoint_url, repo_id=s.repo_id, repo_type=s.repo_type, commit=self.commit,
                token=self.listing.token, use_token=self.listing.use_token, timeout=s.timeout,
                opener=_hub.url_opener(s.proxy, s.validate_certs, s.ca_path))
        if self.peers is not None:
            source = _peers.PeerSource(self.peers, token=s.peer_token, hub=source, hub_share=self.hub_share,
                                       private=s.peer_private, repo_id=s.repo_id,
                                       wait_timeout=s.peer_wait_timeout, timeout=s.timeout, log=self.log,
                                       opener=_peers.peer_opener(s.validate_certs, s.ca_path), retry_wait=s.retry_wait,
                                       publish=self.publish, seed=s.peer_name)
        aria2 = _aria2.Aria2Settings(
            aria2c=self.aria2c_path, connections=s.connections, splits=s.splits, parallel_files=s.parallel_files,
            min_split_size=s.min_split_size, timeout=s.timeout, retry_wait=s.retry_wait,
            validate_certs=s.validate_certs, ca_path=s.ca_path, proxy=s.proxy)
        return _transfer.Transfer(fetching, dest=self.dest, source=source, aria2=aria2, max_tries=s.max_tries,
                                  retry_wait=s.retry_wait, hash_workers=s.hash_workers, progress=progress,
                                  timings=self.timings, log=self.log)

    def _land(self, items: list[_plan.Item], disk: dict[str, Any]) -> dict[str, Any]:
        """Link, fetch, record the manifest; the result, or SnapshotError naming each failed file."""
        self._link_or_fetch(items)
        fetching = [item for item in items if item.action == "fetch"]
        if self.publish is not None:
            # what is in place already (present, linked) is served at once: the peers may take it now
            self.publish([(item.remote.path, item.remote.size) for item in items if item.action != "fetch"])
        self.results.duplicates = _run_result.same_bytes(fetching)
        progress = Progress(self.dest, staging=self.staging, repo_id=self.settings.repo_id, commit=self.commit,
                            items=list(_plan.unique_fetches(fetching).values()))
        bytes_before = progress.bytes_done() if progress.items else 0
        progress.write()
        transfer = self._new_transfer(fetching, progress) if fetching else None
        try:
            failed = transfer.run() if transfer else {}
        except _hub.TokenLeakError as exc:
            progress.write(state="failed", message="refused a URL that carries the token")
            raise SnapshotError("%s. Nothing was handed to aria2: the endpoint (or a proxy on the way) puts the token "
                                "into redirect URLs, which would send it to every host they lead to; fix or "
                                "replace the endpoint, and rotate the token if it may have been logged" % exc)
        fetched_bytes = max(0, sum(it.remote.size for it in progress.items if it.stat is not None) - bytes_before)

        strays = _strays.scan_strays(self.dest, wanted={item.remote.path for item in items}, staging=self.staging,
                                     staging_keys={it.key for it in fetching} if failed else set())
        pruned = _strays.prune(self.dest, strays) if self.settings.prune_partials else []
        if pruned:
            strays = [s for s in strays if s["path"] not in pruned]
        revision_changed = self._record(items, complete=not failed)
        if not failed:
            _staging.cleanup(self.dest)
        if transfer is not None and hasattr(transfer.source, "dropped"):
            self.results.dropped = transfer.source.dropped()
        origins = transfer.origins if transfer is not None else {}
        rows = [_run_result.row(item, _run_result.done_action(item, failed), _run_result.source_of(item, origins, failed))
                for item in items]
        # A refreshed stat record (a file touched but still matching) is bookkeeping, not a change.
        changed = any(r["action"] in ("fetched", "resumed", "linked") for r in rows) or bool(pruned) or revision_changed
        res = self.results.result(rows, commit=self.commit, fetched_bytes=fetched_bytes, strays=strays, pruned=pruned, changed=changed)
        res["disk"] = disk
        return self._finish(res, failed, progress)

    def _record(self, items: Sequence[_plan.Item], *, complete: bool) -> bool:
        """Write the manifest when its content changed; True when more than the files table did."""
        s = self.settings
        files = {
            item.remote.path: {"size": item.remote.size, "sha256": item.sha256, "hub_id": _plan.hub_id(item.remote),
                               "lfs": item.remote.lfs, "stat": item.stat}
            for item in items
        }
        new = _manifest.new_manifest(s.repo_id, s.repo_type, s.revision, self.commit, s.endpoint_url, files)
        new["allow_patterns"] = s.allow_patterns
        new["ignore_patterns"] = s.ignore_patterns
        new["complete"] = complete
        old = None
        try:
            old = _manifest.read_manifest(self.dest)
        except _manifest.ManifestError:
            pass
        if old is None or any(old.get(k) != new.get(k) for k in MANIFEST_KEYS):
            mark = time.monotonic()
            _manifest.write_manifest(self.dest, new)
            self.timings.took("manifest", mark)
        return old is None or any(old.get(k) != new.get(k) for k in MANIFEST_KEYS if k != "files")

    def _finish(self, res: dict[str, Any], failed: Mapping[str, str], progress: Progress) -> dict[str, Any]:
        s = self.settings
        if failed:
            progress.write(state="failed", message="failed: %d file(s)" % len(failed))
            raise SnapshotError(
                "%d file(s) of %s@%s could not be fetched after %d tries: %s"
                % (len(failed), s.repo_id, self.commit[:12], s.max_tries,
                   "; ".join("%s: %s" % kv for kv in sorted(failed.items()))),
                failed=dict(failed),
                result=res,
            )
        if progress.items:
            progress.write(state="done", message="%s@%s: done, %s fetched in %.0f s" % (
                s.repo_id, self.commit[:12], human(res["bytes_fetched"]), res["duration"]))
        return res
