# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hf_snapshot's logic: a Hub revision landed in a directory, every file checked, resumable.

Private to the collection: not a public API, may change without notice.

The promise: a file at its final path is whole and verified. This file is the entry point and the
order of a run (``Run``); each step lives in its own file:

- ``settings``: the argument spec and the validated settings;
- ``run_listing``: what the run learns from the listing (``RunListing``): commit, token, files;
- ``listing``: the revision's listing, with retries, and the patterns;
- ``run_apply``: plan, preflight, then the check-mode preview or the landing (``RunApply``);
- ``plan``: present / link / fetch per file, and the disk preflight;
- ``staging``: the staging area and the verified rename out of it;
- ``transfer``, ``rounds``, ``source``: rounds of resolve + aria2 + hash, from a pluggable URL source
  (the Hub; ``peers`` and ``peerbook``: the other hosts of a fleet);
- ``run_result``: the result dict, its rows and the bytes per source (``RunResult``);
- ``progress``: progress.json and the result's timings;
- ``_modeltree.strays``: files that are not part of the revision, and pruning the partials;
- ``errors``: SnapshotError, which carries its own ``fail_json`` arguments.

The token goes only to the endpoint: the Hub's listing API and a HEAD per file that yields the
signed CDN URL aria2 then fetches without any header. Public repos get no token at all.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import claim as _claim
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._common import paths as _paths
from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import strays as _strays
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peers as _peers
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _plan
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _staging
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.progress import Timings
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.run_apply import RunApply
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.run_listing import RunListing
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.run_result import RunResult
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.settings import Settings
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.settings import argument_spec as settings_spec

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


def find_aria2c(path: str | None = None) -> str | None:
    if path:
        return path if os.access(path, os.X_OK) else None
    return shutil.which("aria2c")


def offline_manifest(settings: Settings) -> dict[str, Any] | None:
    """A pinned commit with a matching manifest and untouched files: no network at all."""
    if not COMMIT_RE.match(settings.revision):
        return None
    try:
        manifest = _manifest.read_manifest(settings.dest)
    except _manifest.ManifestError:
        return None
    if not manifest or manifest.get("commit") != settings.revision or not manifest.get("complete", True):
        return None
    if (manifest.get("repo_id"), manifest.get("repo_type")) != (settings.repo_id, settings.repo_type):
        return None
    if (manifest.get("allow_patterns"), manifest.get("ignore_patterns")) != (settings.allow_patterns, settings.ignore_patterns):
        return None
    for rel, record in manifest["files"].items():
        try:
            path = _paths.dest_path(settings.dest, rel)
        except _paths.UnsafePathError:
            return None
        if not _manifest.same_stat(record.get("stat"), path):
            return None
    return manifest


def argument_spec() -> dict[str, dict[str, Any]]:
    """hf_snapshot's argument spec: the fetch's settings, plus ``resolve_only`` (how this call runs,
    like check mode: not a setting of the fetch, so not part of Settings)."""
    spec = settings_spec()
    spec["resolve_only"] = dict(type="bool", default=False)
    # The same call style: only claim dest's peer-status for run peer_run ("started"), before the fetch
    spec["peer_claim"] = dict(type="bool", default=False)
    return spec


def snapshot(params: Mapping[str, Any], check_mode: bool = False,
             log: Callable[[str], None] | None = None,
             warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run hf_snapshot; returns the result dict (changed, commit, files, ...). Raises SnapshotError.

    Whatever token is in use (given or the host's), it never appears in an error. ``warn``: where
    check mode reports what would fail a real run (disk space, aria2c).
    """
    token = _hub.host_token(params.get("token"))
    settings = None
    try:
        settings = Settings.from_params(params)
        if params.get("peer_claim"):
            return _claim.claim(settings, check_mode=check_mode)
        run = Run(settings, token=token, check_mode=check_mode, log=log,
                  resolve_only=bool(params.get("resolve_only")), warn=warn)
        return run.go()
    except SnapshotError as exc:
        exc.mask(token)
        exc.mask(params.get("peer_token"))
        _claim.claimed_run_failed(settings, check_mode or bool(params.get("resolve_only") or params.get("peer_claim")))
        raise
    except OSError as exc:
        # What the filesystem refused that no check above foresaw (a file where dest needs a folder,
        # a read-only mount, a full disk, an unreadable link_from): one message naming the paths, and
        # the traceback for -vvv (a bug of ours would surface there, not hide behind the message).
        err = SnapshotError("the filesystem refused an operation under %s: %s%s; fix that (a file where a folder must "
                            "be, permissions, a read-only or full filesystem) and run again"
                            % (params.get("dest"), _os_error(exc), _os_paths(exc)),
                            exception=_secrets.mask(traceback.format_exc(), token, params.get("peer_token")))
        err.mask(token)
        err.mask(params.get("peer_token"))
        raise err from exc


def _os_error(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0)
    return "%s%s" % (exc.strerror or exc, " (%s)" % name if name else "")


def _os_paths(exc: OSError) -> str:
    paths = [p for p in (exc.filename, getattr(exc, "filename2", None)) if p]
    return " at %s" % " -> ".join(str(p) for p in paths) if paths else ""


class Run(object):
    """One hf_snapshot call: its settings and token, the order of its steps, and what they learn.

    Its steps are collaborators: ``listing`` (run_listing: the commit, the token's use, the files),
    ``RunApply`` (run_apply: plan, preflight, preview or landing) and ``results`` (run_result: the
    result dict, the duration from this run's start, the bytes per source).
    """

    def __init__(self, settings: Settings, *, token: str | None, check_mode: bool = False,
                 log: Callable[[str], None] | None = None, resolve_only: bool = False,
                 warn: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.dest = settings.dest
        self.staging = _staging.staging_dir(settings.dest)
        self.check_mode = check_mode
        self.log = log or (lambda msg: None)
        self.warn = warn or self.log
        self.resolve_only = resolve_only
        self.timings = Timings()
        self.results = RunResult(settings, check_mode=check_mode, timings=self.timings)
        self.listing = RunListing(settings, token=token, log=self.log, timings=self.timings)
        self.aria2c_path = find_aria2c(settings.aria2c)
        # None: no peer fetching at all (no peer-status file either); [] : a fleet of one
        self.peers = _peers.parse_peers(settings.peers, run=settings.peer_run) if settings.peers is not None else None
        # hub_share's default: everything for a fleet of one (or no peers option), nothing with peers
        self.hub_share = (set(settings.hub_share) if settings.hub_share is not None
                          else (set() if self.peers else None))
        # {path: size} of the files in place that this run's peer-status lists (its peer server serves them)
        self.held: dict[str, int] = {}

    def _status(self, state: str, failed: Sequence[str] = ()) -> None:
        """The peer-status file the other hosts read; written only when this run fetches with peers."""
        if self.peers is not None and not self.check_mode and not self.resolve_only:
            _peers.write_status(self.dest, state, failed, run=self.settings.peer_run, held=self.held)

    def _publish(self, files: Sequence[tuple[str, int]]) -> None:
        """Files now in place and verified: listed in the peer-status at once (the status rewritten atomically)."""
        fresh = {path: size for path, size in files if self.held.get(path) != size}
        if fresh:
            self.held.update(fresh)
            self._status("fetching")

    def go(self) -> dict[str, Any]:
        if self.resolve_only:
            # The revision's commit and file list only: dest is neither read nor created, so no plan,
            # no disk preflight and no lock (the model role resolves a commit before it knows dest).
            return self._listed(self.listing.items(self.dest, whole=True))
        self._refuse_symlinked_meta()
        _staging.check_room(self.dest)
        manifest = offline_manifest(self.settings)
        if manifest is not None:
            self.held.update((rel, record["size"]) for rel, record in manifest["files"].items())
            self._status("done")
            return self._offline(manifest)
        items = self.listing.items(self.dest, whole=False)
        self.listing.refuse_private_over_peers(items, self.peers)
        apply = RunApply(self.settings, listing=self.listing, results=self.results, peers=self.peers,
                         hub_share=self.hub_share, aria2c_path=self.aria2c_path, check_mode=self.check_mode,
                         log=self.log, warn=self.warn, timings=self.timings,
                         publish=self._publish if self.peers is not None else None)
        if self.check_mode:
            return apply.apply(items)
        # dest only after the listing passed its checks (an untrusted answer touches nothing). The
        # status only while the lock is held: a run waiting for it (or giving up) must not overwrite
        # what the live run tells the peers; once held, at once a fresh status, so a status a killed
        # run left tells the peers nothing stale
        _paths.make_dirs(self.dest)  # 0755 whatever the umask (the peer server reads it), only the folders made here
        try:
            with _manifest.DirLock(self.dest, timeout=self.settings.lock_timeout):
                self._status("fetching")
                try:
                    res = apply.apply(items)
                except SnapshotError as exc:
                    self._status("failed", sorted(exc.details.get("failed") or {}))
                    raise
                except BaseException:
                    self._status("failed")
                    raise
                self.held.update((item.remote.path, item.remote.size) for item in items)
                self._status("done")
        except _manifest.LockTimeout as exc:
            raise SnapshotError(str(exc))
        return res

    def _refuse_symlinked_meta(self) -> None:
        """dest/.gpufleet and its staging dir are written as root: never through a link to elsewhere."""
        try:
            _manifest.refuse_symlinked_meta(self.dest, "hf_snapshot",
                                            names=(_staging.STAGING, _manifest.LOCK, _manifest.MANIFEST))
        except _manifest.SymlinkedMetaError as exc:
            raise SnapshotError(str(exc))

    def _offline(self, manifest: dict[str, Any]) -> dict[str, Any]:
        rows = [{"path": rel, "size": record["size"], "action": "present", "source": "present"}
                for rel, record in sorted(manifest["files"].items())]
        strays = _strays.scan_strays(self.dest, wanted=set(manifest["files"]), staging=self.staging)
        pruned = []
        if self.settings.prune_partials and not self.check_mode and any(s["kind"] == "partial" for s in strays):
            with _manifest.DirLock(self.dest, timeout=self.settings.lock_timeout):
                pruned = _strays.prune(self.dest, strays)
        return self.results.result(rows, commit=manifest["commit"], fetched_bytes=0, strays=strays, pruned=pruned,
                                   changed=bool(pruned), offline=True)

    def _listed(self, items: Sequence[_plan.Item]) -> dict[str, Any]:
        res = self.results.listed(items, commit=self.listing.commit)
        # whether the Hub listed the repo only with the token (private or gated): a fetch with peers of
        # such a repo needs peer_private, and its listing_token_required set from this
        res["token_required"] = (self.listing.token_required(items) if self.settings.hub
                                 else bool(self.listing.use_token))
        return res
