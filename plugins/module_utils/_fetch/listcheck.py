# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A listing handed over from another host, held against this host's own listing of the Hub.

Private to the collection: not a public API, may change without notice.

In a fleet (model_distribution=peers) one host resolves the commit and its file list for everyone.
A host with its own Hub connection never takes that list on trust: the ids in it decide which bytes
pass the hash check, so a forged entry for a ``modeling_*.py`` would land whatever its author serves
(and ``trust_remote_code`` would run it). Such a host lists the commit itself (one listing, no file
bytes) and refuses any difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError

# What makes two entries of one path the same file: the ids its bytes are checked against, and its size.
_FIELDS = ("size", "blob_id", "sha256")
# At most this many differences are spelled out in the message (all of them are in ``differences``).
_SHOWN = 10


def differences(given: Sequence[Any], own: Sequence[Any], *, whole: bool = True) -> list[dict[str, Any]]:
    """Every path where two listings (RemoteFile-like: path, size, blob_id, sha256) disagree.

    Each difference is ``{"path", "field", "given", "hub"}``; ``field`` is ``presence`` for a path
    only one of them has (its value: True where present), else the field that differs. ``whole``
    False: a path the Hub has and ``given`` leaves out is no difference (``given`` selects).
    """
    mine = {f.path: f for f in own}
    theirs = {f.path: f for f in given}
    out: list[dict[str, Any]] = []
    for path in sorted((set(mine) if whole else set()) | set(theirs)):
        if path not in mine or path not in theirs:
            out.append({"path": path, "field": "presence", "given": path in theirs, "hub": path in mine})
            continue
        for field in _FIELDS:
            if getattr(theirs[path], field) != getattr(mine[path], field):
                out.append({"path": path, "field": field, "given": getattr(theirs[path], field),
                            "hub": getattr(mine[path], field)})
    return out


def _said(diff: dict[str, Any]) -> str:
    if diff["field"] == "presence":
        return "%s: %s" % (diff["path"], "not on the Hub" if diff["given"] else "left out of the listing")
    return "%s: %s %s, the Hub says %s" % (diff["path"], diff["field"], diff["given"], diff["hub"])


def refuse_differences(given: Sequence[Any], own: Sequence[Any], *, repo_id: str, commit: str, endpoint: str,
                       listing_from: str | None, whole: bool) -> None:
    """Raise SnapshotError naming the listing's source and each differing file, when there is any.

    ``whole``: ``given`` must be the Hub's whole selection (a confirmation, resolve_only), not a part of it.
    """
    found = differences(given, own, whole=whole)
    if not found:
        return
    source = listing_from or "the listing option"
    shown = "; ".join(_said(d) for d in found[:_SHOWN])
    more = " (and %d more)" % (len(found) - _SHOWN) if len(found) > _SHOWN else ""
    raise SnapshotError(
        "refusing the listing of %s@%s handed over from %s: it differs from what %s lists for that commit over this "
        "host's own connection, in %d place(s): %s%s. Nothing was fetched or written. %s is broken or compromised "
        "(a forged id would make forged bytes pass the hash check): check it, and re-run once it lists what the Hub "
        "lists" % (repo_id, commit[:12], source, endpoint, len(found), shown, more, source),
        listing_differences=found)
