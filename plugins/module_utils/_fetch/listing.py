# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the revision holds: the Hub's listing (_hub/listing.py), a listing handed over, the patterns.

Private to the collection: not a public API, may change without notice.

Public repos are listed without a token; the token goes along only once the Hub says the repo
needs it (a private repo looks missing without one, a gated one answers 401).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError
# The Hub's listing is _hub's, the patterns are the model directory's: hf_snapshot reads them here.
from ansible_collections.gpufleet.llm.plugins.module_utils._hub.listing import list_remote  # noqa: F401  pylint: disable=unused-import
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree.patterns import matches_patterns  # noqa: F401  pylint: disable=unused-import


def from_listing(settings: Any) -> tuple[str, list, bool]:
    """(commit, [RemoteFile], False) from ``listing`` (a resolve_only run's ``files``), without the Hub.

    Every entry passes the same checks as the Hub's own answer (ids, size, path safety, a path once):
    a listing handed over from another host is data, not trust.
    """
    commit = settings.revision
    files = []
    for index, entry in enumerate(settings.listing):
        if not isinstance(entry, dict) or "path" not in entry or "size" not in entry or "blob_id" not in entry:
            raise SnapshotError("listing entry %d is not a dict with path, size, blob_id and sha256 (the fields of a "
                                "resolve_only run's files): %s" % (index, _hub.shown(entry)))
        sha256 = entry.get("sha256")
        try:
            files.append(_hub.checked_file(settings.repo_id, commit, entry["path"], size=entry["size"],
                                           blob_id=entry["blob_id"], sha256=sha256, lfs=sha256 is not None))
        except _hub.UntrustedAnswerError as exc:
            raise SnapshotError("refusing listing entry %d: %s; pass the files of a resolve_only run unchanged"
                                % (index, exc)) from None
    files.sort(key=lambda f: f.path)
    try:
        _hub.check_tree(settings.repo_id, commit, files)
    except _hub.UntrustedAnswerError as exc:
        raise SnapshotError("refusing listing: %s; pass the files of a resolve_only run unchanged" % exc) from None
    return commit, files, False
