# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stray files in a model directory: one table of what counts as a downloader's partial.

Private to the collection: not a public API, may change without notice.

hf_snapshot (which reports strays and, with ``prune_partials``, removes the partials) and
model_verify (which fails on a partial and says hf_snapshot's ``prune_partials`` removes it) read
the same table, so what one tool promises the other does. hf_snapshot's scan (``scan_strays``) and
removal (``prune``) live here too, next to the table they apply.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest

# huggingface_hub's .incomplete, aria2's .aria2 control files, browsers' .crdownload, and the
# generic .part / .partial / .download / .tmp of curl, wget and hand-typed scripts
# (".tmp.download" ends in ".download").
PARTIAL_SUFFIXES = (".incomplete", ".aria2", ".part", ".partial", ".crdownload", ".download", ".tmp")


def is_partial(name: str) -> bool:
    """True when ``name`` (a file name or a relative path) is a downloader's leftover."""
    return name.endswith(PARTIAL_SUFFIXES)


def allocated_bytes(path: str) -> int:
    """Bytes ``path`` occupies on disk (a sparse or still-growing file: less than its size)."""
    try:
        st = os.stat(path)
    except OSError:
        return 0
    return min(st.st_size, st.st_blocks * 512)


def _stray(dest: str, path: str, kind: str) -> dict[str, Any]:
    return {"path": os.path.relpath(path, dest), "kind": kind, "bytes": allocated_bytes(path)}


# Files beside a staging file that belong to it (aria2's control file; the mark of a direct
# download, _snapshot_staging.DIRECT_MARK): strays only when their staging file's key is.
STAGING_COMPANIONS = (".aria2", ".direct")


def scan_strays(dest: str, *, wanted: Collection[str], staging: str | None = None,
                staging_keys: Collection[str] = ()) -> list[dict[str, Any]]:
    """Files in ``dest`` that are not part of the revision, sorted by path.

    ``wanted``: the revision's paths (relative to ``dest``). kind ``partial``: a downloader's
    leftover (see PARTIAL_SUFFIXES), and any file in the ``staging`` directory whose content key is
    not in ``staging_keys`` (a fetch that will never resume it); kind ``extra``: any other file not
    in the revision. The metadata directory is ours and never a stray, except its staging files.
    """
    strays = []
    for root, dirs, names in os.walk(dest):
        if root == dest and _manifest.META_DIR in dirs:
            dirs.remove(_manifest.META_DIR)
        for name in names:
            path = os.path.join(root, name)
            if os.path.relpath(path, dest) not in wanted:
                strays.append(_stray(dest, path, "partial" if is_partial(name) else "extra"))
    if staging and os.path.isdir(staging):
        for name in sorted(os.listdir(staging)):
            # a staging file's companions: aria2's control file, a direct download's mark
            base = next((name[: -len(sfx)] for sfx in STAGING_COMPANIONS if name.endswith(sfx)), name)
            path = os.path.join(staging, name)
            if base not in staging_keys and os.path.isfile(path):
                strays.append(_stray(dest, path, "partial"))
    strays.sort(key=lambda s: s["path"])
    return strays


def prune(dest: str, strays: Iterable[dict[str, Any]]) -> list[str]:
    """Remove the strays of kind ``partial`` (regular files only); returns the paths removed.

    Never an ``extra``, never a symlink: an operator's own file next to the model is not ours.
    """
    pruned = []
    for stray in strays:
        if stray["kind"] != "partial":
            continue
        path = os.path.join(dest, stray["path"])
        try:
            if os.path.isfile(path) and not os.path.islink(path):
                os.unlink(path)
                pruned.append(stray["path"])
        except OSError:
            pass
    return pruned
