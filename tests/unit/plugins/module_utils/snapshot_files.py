# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Real files and the Hub's description of them, for the hf_snapshot tests that need no Hub."""
from __future__ import annotations

import hashlib
import os

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _snapshot_plan


def remote_for(path, data, lfs=True):
    """The _hub.RemoteFile the Hub would list for ``data`` at ``path``."""
    blob = hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()  # nosec B324 - git object id
    return _hub.RemoteFile(path, len(data), blob, hashlib.sha256(data).hexdigest() if lfs else None, lfs)


def write(root, rel, data):
    path = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def item_for(dest, rel, data, lfs=True):
    return _snapshot_plan.Item(remote_for(rel, data, lfs), os.path.join(str(dest), rel))


def record(path, remote):
    """The manifest record hf_snapshot writes for a verified file at ``path``."""
    with open(path, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    return {"size": remote.size, "sha256": digest,
            "hub_id": _snapshot_plan.hub_id(remote), "lfs": remote.lfs, "stat": _manifest.stat_record(path)}


def write_manifest(dest, files, commit="c" * 40):
    """A real manifest in ``dest`` (written by _manifest) with ``files`` {path: record}."""
    manifest = _manifest.new_manifest("org/model", "model", "main", commit, "http://hub.invalid", files)
    _manifest.write_manifest(str(dest), manifest)
    return manifest
