# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The staging area ``<dest>/.gpufleet/staging/`` and the one way out of it: a verified rename.

Private to the collection: not a public API, may change without notice.

Bytes arrive in staging (named by content key, directory mode 0700) and are renamed to their final
path only once their hash matched the Hub's. Nothing is written in place, so files hard-linked from
an earlier revision stay intact, and a lost ``.aria2`` control file can never make a partial look
complete (a staging file without one is hashed before it counts).

A placed file this run created is 0644 and every folder made for it 0755, whatever the umask (aria2
creates its files under the process umask): the peer exchange's nginx workers, another user, read
them. Staging itself stays 0700.
"""

from __future__ import annotations

import errno
import os
import shutil
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._common import paths as _paths
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _snapshot_plan
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import strays as _strays
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError

STAGING = "staging"
# aria2's input file, log and output while it runs (inside staging, so mode 0700 covers them).
ARIA2_WORKDIR = "run"
# Beside a staging file that a direct download (the module's own GET, _transfer_direct) is writing:
# its bytes are a true prefix (written in order, never preallocated), so a later round resumes it by
# Range instead of starting over; aria2's files have their .aria2 control file instead.
DIRECT_MARK = _strays.STAGING_COMPANIONS[1]
# Hard links cannot be made here (another filesystem, or one without them): fetch instead.
_NO_HARD_LINK = (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP)
# The longest name written in staging: a content key (an LFS sha256, 64 hex digits; "blob-" and a git
# blob id is shorter) with its longest companion (.aria2, .direct, or .link for a hard link on its way).
LONGEST_STAGED = "f" * 64 + max(_strays.STAGING_COMPANIONS + (".link",), key=len)


def staging_dir(dest: str) -> str:
    return os.path.join(_manifest.meta_dir(dest), STAGING)


def check_room(dest: str) -> None:
    """SnapshotError when a staging path under ``dest`` would be longer than its filesystem takes.

    Checked before anything is written: otherwise the first fetch fails with ENAMETOOLONG, late.
    Both spellings of dest count (as given, and resolved: placing uses the resolved one).
    """
    for root in sorted({os.path.abspath(dest), os.path.realpath(dest)}):
        try:
            _paths.check_length(os.path.join(staging_dir(root), LONGEST_STAGED), what="the staging path",
                                fix="hf_snapshot stages each file in dest/%s/%s/ under a name of up to %d bytes; use a "
                                    "shorter dest" % (_manifest.META_DIR, STAGING, len(LONGEST_STAGED)))
        except _paths.PathTooLongError as exc:
            raise SnapshotError("refusing dest %s: %s" % (_paths.shorten(dest), exc))


def make_staging(dest: str) -> str:
    """Create the staging directory, mode 0700 even if it existed (it holds signed URLs' input file)."""
    staging = staging_dir(dest)
    _manifest.ensure_meta_dir(dest)
    os.makedirs(staging, mode=0o700, exist_ok=True)
    os.chmod(staging, 0o700)
    return staging


def remove(*paths: str) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def place(item: _snapshot_plan.Item, staged: str, dest: str, *, created: bool = True) -> None:
    """Rename a verified staging file to its final path (re-checking the path right before).

    ``created``: the inode is this run's own (fetched or copied), so it gets mode 0644. A hard link
    (``created=False``) shares its inode with an earlier revision, maybe the one ``current`` serves:
    its mode is that file's and stays as it is.
    """
    final = _paths.dest_path(dest, item.remote.path)
    _folder_for(final, dest)
    if os.path.isdir(final) and not os.path.islink(final):
        raise SnapshotError("%s is a directory where the revision has a file; move it away" % final)
    if created:
        os.chmod(staged, 0o644)
    os.replace(staged, final)
    item.final = final
    # After the chmod and the rename: both move ctime, and the record must describe the file as it stays.
    item.stat = _manifest.stat_record(final)


def _folder_for(final: str, dest: str) -> None:
    """Make ``final``'s folder, or say which file of the tree stands where the revision has a folder."""
    folder = os.path.dirname(final)
    probe = folder
    while len(probe) > len(dest):
        if os.path.lexists(probe) and not os.path.isdir(probe):
            raise SnapshotError("%s is a file where the revision has a folder (for %s); move it away"
                                % (probe, os.path.relpath(final, dest)))
        probe = os.path.dirname(probe)
    _paths.make_dirs(folder)  # 0755 whatever the umask, only the folders made here


def _share_record(shared: dict | None, fresh: dict) -> dict:
    """The one stat record of an inode this run placed under several names, refreshed in place.

    Every hard link moves the inode's ctime, which would make the records taken for its earlier
    names stale at once (and the next run hash them again). The caller vouched for ``shared`` right
    before its link; refreshing that one dict, which those names' records are, keeps them all true.
    """
    if shared is None:
        return dict(fresh)
    shared.clear()
    shared.update(fresh)
    return shared


def link_from_source(item: _snapshot_plan.Item, staging: str, dest: str) -> bool:
    """Place ``item`` as a hard link to ``item.source`` (an earlier revision's file).

    The source counts only while its stat record holds or its bytes still hash right. Returns False
    when the item must be fetched instead. The link moves the source inode's ctime, so the source
    revision's own manifest and stat cache records go stale: model_verify ``auto`` hashes those
    files again, and hf_snapshot does unless it is given this revision as ``link_from`` (see
    _snapshot_plan). This run's records are taken after its links, and ``record`` (in memory)
    follows, so several names linked to one source cost one check.
    """
    src, record = item.source
    if _manifest.same_stat(record.get("stat"), src):
        item.sha256 = record.get("sha256") or item.remote.sha256
        shared = record.get("stat")
    else:
        # Its stat must hold from before the hash to the link, or the link would carry unchecked bytes.
        ok, digest, dummy = _snapshot_plan.verify_keeping_stat(src, item.remote)
        if not ok:
            return False
        item.sha256 = digest
        shared = None
    tmp = _paths.dest_path(staging, item.key + ".link")  # contained even if a key were hostile
    try:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.link(src, tmp)
    except OSError as exc:
        if exc.errno in _NO_HARD_LINK:
            return False
        raise
    place(item, tmp, dest, created=False)
    record["stat"] = item.stat = _share_record(shared, item.stat)
    return True


def link_duplicate(first: _snapshot_plan.Item, other: _snapshot_plan.Item, staging: str, dest: str) -> None:
    """Place ``other`` (the same bytes as the placed ``first``) as a hard link, or a copy, of it.

    ``first`` must still be the version this run verified; if something wrote to it since, its bytes
    decide before they are linked under another name.
    """
    vouched = _manifest.same_stat(first.stat, first.final)
    if not vouched and not _snapshot_plan.verify_keeping_stat(first.final, other.remote)[0]:
        raise SnapshotError("%s changed after this run verified it (another writer in %s?); re-run hf_snapshot"
                            % (first.final, dest))
    other.source = (first.final, {"stat": first.stat, "sha256": first.sha256})
    tmp = _paths.dest_path(staging, other.key + ".link")  # contained even if a key were hostile
    if os.path.lexists(tmp):
        os.unlink(tmp)
    try:
        os.link(first.final, tmp)
        linked = True
    except OSError:
        shutil.copyfile(first.final, tmp)
        linked = False
    other.sha256 = first.sha256
    place(other, tmp, dest, created=not linked)
    if linked:
        first.stat = other.stat = _share_record(first.stat if vouched else None, other.stat)


def hash_staged(path: str, remote: Any) -> tuple[bool, str | None, dict[str, int] | None]:
    """(ok, sha256, stat record) of a staging file; not ok and no record if it changed while hashed.

    The record vouches for the file until it is placed (place() records it again after its rename).
    """
    return _snapshot_plan.verify_keeping_stat(path, remote)


def settle_leftover(item: _snapshot_plan.Item, staged: str) -> bool:
    """Decide about a staging file left by an earlier run before aria2 sees it.

    With --continue, aria2 takes a file without its .aria2 control file as complete up to its
    length (a preallocated file looks whole): such a file is hashed, kept only if it matches.
    Returns True when the file is whole and verified (ready to place).
    """
    ctrl = staged + ".aria2"
    marker = staged + DIRECT_MARK
    if not os.path.exists(staged):
        remove(ctrl, marker)
        return False
    if os.path.exists(ctrl):
        item.resumed = True
        return False
    if os.path.exists(marker):
        if os.path.getsize(staged) < item.remote.size:
            item.resumed = True  # a direct download's prefix: its next GET asks for the rest (Range)
            return False
        remove(marker)  # as long as the file, or longer: only its hash decides, below
    ok, digest = _snapshot_plan.verify_local(staged, item.remote)
    if ok:
        item.sha256 = digest
        item.resumed = True
        return True
    os.unlink(staged)
    return False


def mark_direct(staged: str) -> None:
    """``staged`` is (about to be) written by a direct download, in order: see DIRECT_MARK."""
    with open(staged + DIRECT_MARK, "a"):
        pass


def cleanup(dest: str) -> None:
    """After a run with no failure: aria2's work directory and the (then empty) staging directory go."""
    staging = staging_dir(dest)
    if os.path.isdir(staging):
        shutil.rmtree(os.path.join(staging, ARIA2_WORKDIR), ignore_errors=True)
        try:
            os.rmdir(staging)
        except OSError:
            pass
