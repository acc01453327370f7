# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a Hub endpoint answers, checked where it enters: ids, sizes and paths of a listing.

Private to the collection: not a public API, may change without notice.

A listing's ids and paths become file names (staging files are named by content id, final paths by
path): anything but the exact shapes the Hub uses could walk out of the destination. ``_hub``
re-exports these names; callers use them from there.
"""

from __future__ import annotations

import collections

from ansible_collections.gpufleet.llm.plugins.module_utils._common import paths as _paths

# sha256 is None for a non-LFS file: the Hub gives only its git blob id (blob_id); callers hash the
# bytes they receive, check them against blob_id and record the sha256 themselves.
RemoteFile = collections.namedtuple("RemoteFile", ["path", "size", "blob_id", "sha256", "lfs"])


class UntrustedAnswerError(Exception):
    """The endpoint answered what no honest Hub answers (a malformed id, path or commit): never retried."""


_HEX = frozenset("0123456789abcdef")


def is_hex(value, length):
    return isinstance(value, str) and len(value) == length and set(value) <= _HEX


def shown(value):
    """A remote value as an error shows it: quoted, cut to 120 characters."""
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def checked_file(repo_id, commit, path, *, size, blob_id, sha256, lfs):
    """A RemoteFile from one listing entry, or UntrustedAnswerError naming the file and the bad field."""
    try:
        _paths.check_relative(path)
    except _paths.UnsafePathError as exc:
        raise UntrustedAnswerError("the listing of %s@%s names an unsafe path: %s" % (repo_id, commit, exc))
    problem = None
    if not is_hex(blob_id, 40):
        problem = "git blob id (oid) %s is not 40 lowercase hex digits" % shown(blob_id)
    elif lfs and not is_hex(sha256, 64):
        problem = "LFS sha256 (lfs.oid) %s is not 64 lowercase hex digits" % shown(sha256)
    elif isinstance(size, bool) or not isinstance(size, int) or size < 0:
        problem = "size %s is not a byte count" % shown(size)
    if problem:
        raise UntrustedAnswerError("the listing of %s@%s gives %s a malformed %s" % (repo_id, commit, shown(path), problem))
    return RemoteFile(path=path, size=size, blob_id=blob_id, sha256=sha256 if lfs else None, lfs=lfs)


def check_tree(repo_id, commit, files):
    """A git tree names each path once, and never a file and a folder alike: else placing would crash."""
    paths = set()
    for remote in files:
        if remote.path in paths:
            raise UntrustedAnswerError("the listing of %s@%s names %s twice" % (repo_id, commit, shown(remote.path)))
        paths.add(remote.path)
    for remote in files:
        parts = remote.path.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in paths:
                raise UntrustedAnswerError("the listing of %s@%s names %s both as a file and as a folder (of %s)"
                                           % (repo_id, commit, shown("/".join(parts[:depth])), shown(remote.path)))
