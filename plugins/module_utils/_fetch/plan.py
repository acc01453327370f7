# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What hf_snapshot does about each file of a revision: present, link or fetch; and the disk it needs.

Private to the collection: not a public API, may change without notice.

A file is ``present`` when the manifest's stat record for it still matches (no hashing; a record
without ctime_ns never does, see _manifest), or the record of a ``link_from`` file that is the same
inode does, or when its bytes hash to the Hub's id and its stat did not move while they were
hashed; ``link`` when an earlier revision (``link_from``) holds the same content; ``fetch``
otherwise. A same-size corrupted file is not present: only its bytes decide.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._common import hashing as _hashing
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._common import paths as _paths
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import strays as _strays


def content_key(remote: Any) -> str:
    """Staging name and dedupe key: files with the same bytes share one fetch."""
    return remote.sha256 if remote.lfs and remote.sha256 else "blob-%s" % remote.blob_id


def hub_id(remote: Any) -> str:
    """The Hub's own id for a file's bytes: LFS sha256, else the git blob id."""
    return remote.sha256 if remote.lfs else remote.blob_id


class Item(object):
    """One remote file (_hub.RemoteFile) and what this run does about it."""

    __slots__ = ("remote", "final", "key", "action", "sha256", "stat", "source", "error", "resumed")

    def __init__(self, remote: Any, final: str) -> None:
        self.remote = remote
        self.final = final
        self.key = content_key(remote)
        self.action: str | None = None  # present | link | fetch
        self.sha256: str | None = remote.sha256
        self.stat: dict[str, int] | None = None  # set once the file is verified at its final path
        self.source: tuple[str, dict[str, Any]] | None = None  # (path, manifest record) to link from
        self.error: str | None = None
        self.resumed = False


def verify_local(path: str, remote: Any) -> tuple[bool, str | None]:
    """(ok, sha256) for the bytes at ``path`` against what the Hub says about ``remote``."""
    try:
        if os.path.getsize(path) != remote.size:
            return False, None
        if remote.lfs and remote.sha256:
            digest = _hashing.sha256_file(path)
            return digest == remote.sha256, digest
        if _hashing.git_blob_sha1(path) != remote.blob_id:
            return False, None
        return True, _hashing.sha256_file(path)
    except OSError:
        return False, None


def link_candidates(link_from: Iterable[str] | None) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """{hub id or sha256: [(path, record)]} from the manifests of earlier verified revisions."""
    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for directory in link_from or []:
        try:
            manifest = _manifest.read_manifest(directory)
        except _manifest.ManifestError:
            continue
        if not manifest:
            continue
        for rel, record in manifest["files"].items():
            try:
                path = _paths.dest_path(directory, rel)
            except _paths.UnsafePathError:
                continue
            for ident in {record.get("hub_id"), record.get("sha256")} - {None}:
                found.setdefault(ident, []).append((path, record))
    return found


def _recorded_unchanged(item: Item, record: dict[str, Any] | None) -> bool:
    return bool(
        record
        and record.get("hub_id") == hub_id(item.remote)
        and record.get("size") == item.remote.size
        and _manifest.same_stat(record.get("stat"), item.final)
    )


def _recorded_by_link_source(item: Item, candidates: dict[str, list[tuple[str, dict[str, Any]]]]) -> dict[str, Any] | None:
    """The record of a ``link_from`` file that is this very inode at this very version, if any.

    A revision's own records go stale when a later one is hard-linked from it (the link moves the
    inode's ctime); the later revision's record, taken after its link, still holds for the shared
    inode, so a rollback with ``link_from`` the revision ``current`` serves hashes only what differs.
    """
    if os.path.islink(item.final):
        return None
    for path, record in candidates.get(hub_id(item.remote), []):
        stat = record.get("stat")
        if (record.get("size") == item.remote.size and record.get("sha256")
                and _manifest.same_stat(stat, path) and _manifest.same_stat(stat, item.final)):
            return record
    return None


def verify_keeping_stat(path: str, remote: Any) -> tuple[bool, str | None, dict[str, int] | None]:
    """(ok, sha256, stat record) for the bytes at ``path``; not ok if its stat moved while hashed.

    The record is the one taken before hashing: a record taken after could describe a version
    written while the hash read an older one, and would then vouch for bytes nobody checked.
    """
    try:
        before = _manifest.stat_record(path)
    except OSError:
        return False, None, None
    ok, digest = verify_local(path, remote)
    if not (ok and _manifest.same_stat(before, path)):
        return False, digest, None
    return True, digest, before


def _decide_by_hash(to_hash: Sequence[Item], workers: int | None) -> None:
    """A file at its final path without a matching stat record: changed, corrupted, or never
    recorded. Its bytes decide."""
    with ThreadPoolExecutor(max_workers=workers or _hashing.default_workers()) as pool:
        results = list(pool.map(lambda it: verify_keeping_stat(it.final, it.remote), to_hash))
    for item, (ok, digest, record) in zip(to_hash, results):
        if ok and os.path.isfile(item.final) and not os.path.islink(item.final):
            item.action = "present"
            item.sha256 = digest
            item.stat = record
        else:
            item.action = "fetch"
            item.error = "differs from the Hub's copy"


def plan(items: Sequence[Item], manifest: dict[str, Any] | None, *, link_from: Iterable[str] | None = None,
         workers: int | None = None) -> Sequence[Item]:
    """Decide present / link / fetch for every item (hashing files whose stat record is stale)."""
    old = (manifest or {}).get("files", {})
    candidates = link_candidates(link_from) if link_from else {}
    to_hash = []
    for item in items:
        record = old.get(item.remote.path)
        if not _recorded_unchanged(item, record):
            record = _recorded_by_link_source(item, candidates) if os.path.lexists(item.final) else None
        if record:
            item.action = "present"
            item.sha256 = record.get("sha256")
            item.stat = record.get("stat")
        elif os.path.lexists(item.final):
            to_hash.append(item)
        else:
            item.action = "fetch"
    if to_hash:
        _decide_by_hash(to_hash, workers)
    for item in items:
        if item.action != "fetch":
            continue
        for path, record in candidates.get(hub_id(item.remote), []):
            if record.get("size") == item.remote.size and os.path.isfile(path):
                item.action = "link"
                item.source = (path, record)
                break
    return items


def unique_fetches(items: Iterable[Item]) -> dict[str, Item]:
    """{content key: first item} of the items to fetch: the same bytes under two paths travel once."""
    out: dict[str, Item] = {}
    for item in items:
        if item.action == "fetch":
            out.setdefault(item.key, item)
    return out


def free_bytes(path: str) -> tuple[int, str]:
    """(bytes free for an unprivileged writer, the existing directory measured) for ``path``."""
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize, probe


def _same_filesystem(path: str, device: int) -> bool:
    try:
        return os.stat(path).st_dev == device
    except OSError:
        return False


def disk_figures(dest: str, *, to_fetch: dict[str, Item], staging: str, min_free_bytes: int,
                 to_link: Iterable[Item] = ()) -> dict[str, Any]:
    """The disk preflight: bytes still needed (less what staging files already hold) and bytes free.

    ``to_link``: items planned as hard links. A link takes no space only on dest's own filesystem;
    one whose source lives elsewhere will be fetched (EXDEV), so its bytes count as needed.
    ``short_bytes`` > 0 means the fetch does not fit with ``min_free_bytes`` left over.
    """
    free, probe = free_bytes(dest)
    device = os.stat(probe).st_dev
    linked = 0
    copies: dict[str, Item] = {}
    for item in to_link:
        if item.source and _same_filesystem(item.source[0], device):
            linked += item.remote.size
        elif item.key not in to_fetch:
            copies.setdefault(item.key, item)
    pending = list(to_fetch.values()) + list(copies.values())
    have = sum(_strays.allocated_bytes(os.path.join(staging, item.key)) for item in pending)
    needed = max(0, sum(item.remote.size for item in pending) - have)
    return {"needed_bytes": needed, "free_bytes": free, "min_free_bytes": min_free_bytes, "filesystem": probe,
            "linked_bytes": linked, "short_bytes": max(0, needed + min_free_bytes - free) if pending else 0}
