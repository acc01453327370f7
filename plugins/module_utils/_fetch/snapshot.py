# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hf_snapshot's logic: a Hub revision landed in a directory, every file checked, resumable.

Private to the collection: not a public API, may change without notice.

The promise: a file at its final path is whole and verified. This file is the entry point and the
order of a run (``Run``); each step lives in its own file:

- ``_snapshot_settings``: the argument spec and the validated settings;
- ``_snapshot_listing``: the revision's listing, with retries, and the patterns;
- ``_snapshot_plan``: present / link / fetch per file, and the disk preflight;
- ``_snapshot_staging``: the staging area and the verified rename out of it;
- ``_transfer``: rounds of resolve + aria2 + hash, from a pluggable URL source (the Hub);
- ``_snapshot_progress``: progress.json and the result's timings;
- ``_strays``: files that are not part of the revision, and pruning the partials;
- ``_snapshot_errors``: SnapshotError, which carries its own ``fail_json`` arguments.

The token goes only to the endpoint: the Hub's listing API and a HEAD per file that yields the
signed CDN URL aria2 then fetches without any header. Public repos get no token at all.
"""

from __future__ import annotations

import errno
import http.client
import os
import re
import shutil
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import aria2 as _aria2
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import claim as _claim
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._common import paths as _paths
from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import strays as _strays
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peers as _peers
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import transfer as _transfer
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import listcheck as _listcheck
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import listing as _listing
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _plan
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _staging
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError, backoff
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import private_over_peers_message
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.progress import Progress, Timings, human
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.settings import Settings
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.settings import argument_spec as settings_spec

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
# What makes two manifests the same revision of the same selection (``written_at`` does not count).
MANIFEST_KEYS = ("repo_id", "repo_type", "revision", "commit", "endpoint", "files", "allow_patterns",
                 "ignore_patterns", "complete")


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


def _row(item: _plan.Item, action: str, source: str | None = None) -> dict[str, Any]:
    row = {"path": item.remote.path, "size": item.remote.size, "action": action}
    if source is not None:
        row["source"] = source
    return row


def _source(item: _plan.Item, origins: Mapping[str, str], failed: Mapping[str, str]) -> str | None:
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
    for row in rows:
        if row["path"] in duplicates:
            continue
        source = row.get("source") or ""
        if source == "hub":
            hub += row["size"]
        elif source.startswith("peer:"):
            from_peers[source[5:]] = from_peers.get(source[5:], 0) + row["size"]
    return {"bytes_from_hub": hub, "bytes_from_peers": sum(from_peers.values()), "from_peers": from_peers}


def _done_action(item: _plan.Item, failed: Mapping[str, str]) -> str:
    if item.remote.path in failed:
        return "failed"
    if item.action == "present":
        return "present"
    if item.action == "link":
        return "linked"
    return "resumed" if item.resumed else "fetched"


class Run(object):
    """One hf_snapshot call: its settings and token, and what it learns (commit, timings)."""

    def __init__(self, settings: Settings, *, token: str | None, check_mode: bool = False,
                 log: Callable[[str], None] | None = None, resolve_only: bool = False,
                 warn: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.dest = settings.dest
        self.staging = _staging.staging_dir(settings.dest)
        self.token = token
        self.use_token = False  # the listing decides: only a repo that needs it gets the token
        self.check_mode = check_mode
        self.log = log or (lambda msg: None)
        self.warn = warn or self.log
        self.resolve_only = resolve_only
        self.started = time.monotonic()
        self.timings = Timings()
        self.commit: str | None = None
        self.aria2c_path = find_aria2c(settings.aria2c)
        # None: no peer fetching at all (no peer-status file either); [] : a fleet of one
        self.peers = _peers.parse_peers(settings.peers, run=settings.peer_run) if settings.peers is not None else None
        # hub_share's default: everything for a fleet of one (or no peers option), nothing with peers
        self.hub_share = (set(settings.hub_share) if settings.hub_share is not None
                          else (set() if self.peers else None))
        self.dropped: list[dict[str, str]] = []
        # paths whose bytes travel with another path of the same content (counted once per source)
        self.duplicates: set[str] = set()

    def _status(self, state: str, failed: Sequence[str] = ()) -> None:
        """The peer-status file the other hosts read; written only when this run fetches with peers."""
        if self.peers is not None and not self.check_mode and not self.resolve_only:
            _peers.write_status(self.dest, state, failed, run=self.settings.peer_run)

    def go(self) -> dict[str, Any]:
        if self.resolve_only:
            # The revision's commit and file list only: dest is neither read nor created, so no plan,
            # no disk preflight and no lock (the model role resolves a commit before it knows dest).
            return self._listed(self._list())
        self._refuse_symlinked_meta()
        _staging.check_room(self.dest)
        manifest = offline_manifest(self.settings)
        if manifest is not None:
            self._status("done")
            return self._offline(manifest)
        items = self._list()
        self._refuse_private_over_peers(items)
        if self.check_mode:
            return self._apply(items)
        # dest only after the listing passed its checks (an untrusted answer touches nothing). The
        # status only while the lock is held: a run waiting for it (or giving up) must not overwrite
        # what the live run tells the peers; once held, at once a fresh status, so a status a killed
        # run left tells the peers nothing stale
        _paths.make_dirs(self.dest)  # 0755 whatever the umask (the peer server reads it), only the folders made here
        try:
            with _manifest.DirLock(self.dest, timeout=self.settings.lock_timeout):
                self._status("fetching")
                try:
                    res = self._apply(items)
                except SnapshotError as exc:
                    self._status("failed", sorted(exc.details.get("failed") or {}))
                    raise
                except BaseException:
                    self._status("failed")
                    raise
                self._status("done")
        except _manifest.LockTimeout as exc:
            raise SnapshotError(str(exc))
        return res

    def _refuse_private_over_peers(self, items: Sequence[_plan.Item]) -> None:
        """A repo that needs the token (private or gated) is fetched with peers only with peer_private:
        its files then travel between hosts over the peer exchange, plain HTTP behind a per-run secret.
        Known from the listing handed over (listing_token_required), this run's own listing, or, on a
        host with Hub access, one HEAD without the token (a gated repo lists without it)."""
        s = self.settings
        if self.peers is None or s.peer_private:
            return
        if s.listing_token_required or self.use_token or (s.hub and self._token_required(items)):
            raise SnapshotError(private_over_peers_message(s.repo_id))

    def _token_required(self, items: Sequence[_plan.Item]) -> bool:
        """Whether the repo needs the token: its listing did (private), or the Hub refuses a file without
        it (gated: the listing is public, the files are not). One HEAD of the smallest file, no token;
        an answer other than a file or a passing fault counts as needing it (the safe side)."""
        if self.use_token:
            return True
        s = self.settings
        probe = min(items, key=lambda it: (it.remote.size, it.remote.path))
        opener = _hub.url_opener(s.proxy, s.validate_certs, s.ca_path)
        last = ""
        for attempt in range(1, s.max_tries + 1):
            try:
                _hub.resolve_file(opener, s.endpoint_url, s.repo_id, self.commit, probe.remote.path, token=None,
                                  repo_type=s.repo_type, timeout=s.timeout)
                return False
            except _hub.HubHTTPError as exc:
                if exc.status < 500 and exc.status != 429:
                    return True
                last = "HTTP %s" % exc.status
            except (OSError, ValueError, http.client.HTTPException) as exc:
                last = "%s: %s" % (type(exc).__name__, exc)
            if attempt < s.max_tries:
                time.sleep(backoff(s.retry_wait, attempt))
        raise SnapshotError("could not tell whether %s needs the token: a HEAD of %s without it failed %d times, last: %s"
                            % (s.repo_id, probe.remote.path, s.max_tries, last))

    def _refuse_symlinked_meta(self) -> None:
        """dest/.gpufleet and its staging dir are written as root: never through a link to elsewhere."""
        try:
            _manifest.refuse_symlinked_meta(self.dest, "hf_snapshot",
                                            names=(_staging.STAGING, _manifest.LOCK, _manifest.MANIFEST))
        except _manifest.SymlinkedMetaError as exc:
            raise SnapshotError(str(exc))

    def _offline(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.commit = manifest["commit"]
        rows = [{"path": rel, "size": record["size"], "action": "present", "source": "present"}
                for rel, record in sorted(manifest["files"].items())]
        strays = _strays.scan_strays(self.dest, wanted=set(manifest["files"]), staging=self.staging)
        pruned = []
        if self.settings.prune_partials and not self.check_mode and any(s["kind"] == "partial" for s in strays):
            with _manifest.DirLock(self.dest, timeout=self.settings.lock_timeout):
                pruned = _strays.prune(self.dest, strays)
        return self._result(rows, fetched_bytes=0, strays=strays, pruned=pruned, changed=bool(pruned), offline=True)

    def _list(self) -> list[_plan.Item]:
        """The revision's selected files as plan Items; refuses any path that would land outside dest."""
        s = self.settings
        mark = time.monotonic()
        if s.listing is not None:
            self.commit, remote_files, self.use_token = _listing.from_listing(s)
            if s.hub:
                # Another host's list is never trusted where this host can ask the Hub itself: every entry
                # must be the Hub's own (a confirmation, resolve_only: the whole selection, nothing left out).
                self.commit, own, self.use_token = _listing.list_remote(s, token=self.token, log=self.log)
                _listcheck.refuse_differences(
                    [f for f in remote_files if _listing.matches_patterns(f.path, s.allow_patterns, s.ignore_patterns)],
                    [f for f in own if _listing.matches_patterns(f.path, s.allow_patterns, s.ignore_patterns)],
                    repo_id=s.repo_id, commit=self.commit, endpoint=s.endpoint_url, listing_from=s.listing_from,
                    whole=self.resolve_only)
        else:
            self.commit, remote_files, self.use_token = _listing.list_remote(s, token=self.token, log=self.log)
        self.timings.took("list", mark)
        unsafe = []
        items = []
        for remote in remote_files:
            if not _listing.matches_patterns(remote.path, s.allow_patterns, s.ignore_patterns):
                continue
            try:
                if remote.path.split("/")[0] == _manifest.META_DIR:
                    raise _paths.UnsafePathError("%r is inside %s/, which hf_snapshot keeps for itself"
                                                 % (remote.path, _manifest.META_DIR))
                items.append(_plan.Item(remote, _paths.dest_path(self.dest, remote.path)))
            except _paths.UnsafePathError as exc:
                unsafe.append(str(exc))
        if unsafe:
            raise SnapshotError("refusing %s@%s: %d remote path(s) would land outside %s or not fit its filesystem: %s" % (
                s.repo_id, self.commit, len(unsafe), self.dest, "; ".join(unsafe[:10])), unsafe=unsafe)
        if not items:
            raise SnapshotError("%s@%s has no file matching allow_patterns=%s ignore_patterns=%s"
                                % (s.repo_id, self.commit, s.allow_patterns, s.ignore_patterns))
        return items

    def _listed(self, items: Sequence[_plan.Item]) -> dict[str, Any]:
        # sha256 and blob_id: what another run needs to take this listing as its ``listing``
        rows = [dict(_row(item, "listed"), sha256=item.remote.sha256, blob_id=item.remote.blob_id) for item in items]
        res = self._result(rows, fetched_bytes=0, strays=[], pruned=[], changed=False)
        res["resolve_only"] = True
        # whether the Hub listed the repo only with the token (private or gated): a fetch with peers of
        # such a repo needs peer_private, and its listing_token_required set from this
        res["token_required"] = self._token_required(items) if self.settings.hub else bool(self.use_token)
        return res

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

    def _apply(self, items: list[_plan.Item]) -> dict[str, Any]:
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
        self.duplicates = same_bytes(items)
        planned = {it.key: _peers.planned_source(it.remote.path, peers=self.peers or [], hub_share=self.hub_share)
                   for it in items if it.action == "fetch"}
        res = self._result([_row(it, it.action, _source(it, planned, {})) for it in items], fetched_bytes=0, strays=strays,
                           pruned=[],
                           changed=changed)
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
                endpoint=s.endpoint_url, repo_id=s.repo_id, repo_type=s.repo_type, commit=self.commit, token=self.token,
                use_token=self.use_token, timeout=s.timeout, opener=_hub.url_opener(s.proxy, s.validate_certs, s.ca_path))
        if self.peers is not None:
            source = _peers.PeerSource(self.peers, token=s.peer_token, hub=source, hub_share=self.hub_share,
                                       private=s.peer_private, repo_id=s.repo_id,
                                       wait_timeout=s.peer_wait_timeout, timeout=s.timeout, log=self.log,
                                       opener=_peers.peer_opener(s.validate_certs, s.ca_path), retry_wait=s.retry_wait)
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
        self.duplicates = same_bytes(fetching)
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
            self.dropped = transfer.source.dropped()
        origins = transfer.origins if transfer is not None else {}
        rows = [_row(item, _done_action(item, failed), _source(item, origins, failed)) for item in items]
        # A refreshed stat record (a file touched but still matching) is bookkeeping, not a change.
        changed = any(r["action"] in ("fetched", "resumed", "linked") for r in rows) or bool(pruned) or revision_changed
        res = self._result(rows, fetched_bytes=fetched_bytes, strays=strays, pruned=pruned, changed=changed)
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

    def _result(self, rows: list[dict[str, Any]], *, fetched_bytes: int, strays: list[dict[str, Any]],
                pruned: list[str], changed: bool, offline: bool = False) -> dict[str, Any]:
        duration = time.monotonic() - self.started
        return {
            "changed": bool(changed),
            "repo_id": self.settings.repo_id,
            "revision": self.settings.revision,
            "commit": self.commit,
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
            **self._sources(rows),
        }

    def _sources(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Bytes per source of the files this run placed (the check-mode plan: where they would come from)."""
        return dict(source_bytes(rows, self.duplicates), peers_dropped=list(self.dropped))
