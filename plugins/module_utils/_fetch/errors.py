# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hf_snapshot's failures, each carrying what the module reports, and the backoff between tries.

Private to the collection: not a public API, may change without notice.
"""

from __future__ import annotations

# What the Hub's calls share with hf_snapshot (its failure, the backoff) lives in _hub; hf_snapshot's
# code keeps reading these names here.
from ansible_collections.gpufleet.llm.plugins.module_utils._hub.errors import (  # noqa: F401  pylint: disable=unused-import
    MAX_BACKOFF, SnapshotError, backoff)


def private_over_peers_message(repo_id: str) -> str:
    """Issue 20 item 14c: why a repo that needs the token is not fetched with peers without peer_private."""
    return ("%s needs the token (a private or gated repo): fetched with peers, its files would travel between the "
            "hosts over the peer exchange, plain HTTP on the cluster network guarded only by a per-run secret, "
            "readable by anyone there who sees a request. Set peer_private=true to allow that (role "
            "gpufleet.llm.model: model_peer_private_repos), or fetch it without peers (model_distribution=hub)" % repo_id)
