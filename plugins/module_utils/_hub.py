# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a Hub revision holds, through huggingface_hub.

Private to the collection: not a public API, may change without notice.

Listing uses the tree API (paginated, every file with size and LFS sha256), not model_info's
siblings, which large repos truncate and some mirrors return without metadata. The revision is
resolved to a commit first and listed at that commit, so a branch moving mid-listing cannot mix
two commits.
"""

from __future__ import annotations

import collections

# sha256 is None for a non-LFS file: the Hub gives only its git blob id (blob_id); callers hash the
# bytes they receive, check them against blob_id and record the sha256 themselves.
RemoteFile = collections.namedtuple("RemoteFile", ["path", "size", "blob_id", "sha256", "lfs"])


def hf_api(endpoint=None, token=None):
    """An HfApi bound to ``endpoint`` (None: HF_ENDPOINT or the public Hub) and ``token``.

    ``token=None`` lets huggingface_hub find the host's token (HF_TOKEN, token file); pass False to
    send none.
    """
    from huggingface_hub import HfApi  # imported late: the module reports a missing library itself

    return HfApi(endpoint=endpoint, token=token)


def resolve_commit(api, repo_id, revision, repo_type="model"):
    """The 40-hex commit sha that ``revision`` (branch, tag or sha) names right now."""
    info = api.repo_info(repo_id, revision=revision, repo_type=repo_type)
    return info.sha


def list_revision(api, repo_id, commit, repo_type="model"):
    """Every file of ``repo_id`` at ``commit``, as RemoteFile, sorted by path."""
    files = []
    for entry in api.list_repo_tree(repo_id, revision=commit, repo_type=repo_type, recursive=True):
        if not hasattr(entry, "blob_id"):  # a folder
            continue
        lfs = getattr(entry, "lfs", None)
        files.append(
            RemoteFile(
                path=entry.path,
                size=entry.size,
                blob_id=entry.blob_id,
                sha256=lfs.sha256 if lfs else None,
                lfs=bool(lfs),
            )
        )
    files.sort(key=lambda f: f.path)
    return files
