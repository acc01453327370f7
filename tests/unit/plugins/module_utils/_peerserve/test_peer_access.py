# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""peer_serve's access check (issue 20 item 6): under a hardened umask the model trees are 0700 and nginx's
nobody workers answer 404 for every file. The check runs with nobody's ids against real directory trees under
/tmp (no nginx needed): mode bits and owners, not access(2), which says yes to root."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._peerserve import serve as _peer_serve
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure

NOBODY = _peer_serve.Worker("nobody", "nogroup", 65534, (65534,))


@pytest.fixture
def tree():
    top = tempfile.mkdtemp(prefix="gpufleet-peer-access-", dir="/tmp")
    os.chmod(top, 0o755)
    root = os.path.join(top, "models")
    commit = os.path.join(root, "kimi", "c1")
    os.makedirs(os.path.join(commit, ".gpufleet"))
    os.makedirs(os.path.join(commit, "sub"))
    for d in (root, os.path.dirname(commit), commit, os.path.join(commit, ".gpufleet"), os.path.join(commit, "sub")):
        os.chmod(d, 0o755)
    for rel, mode in (("config.json", 0o644), ("sub/w.safetensors", 0o644), (".gpufleet/peer-status.json", 0o644),
                      (".gpufleet/manifest.json", 0o600), ("x.aria2", 0o600)):
        with open(os.path.join(commit, rel), "w") as handle:
            handle.write("{}")
        os.chmod(os.path.join(commit, rel), mode)
    yield root
    shutil.rmtree(top)


def test_a_readable_tree_passes_and_a_missing_commit_dir_is_fine(tree):
    # manifest.json and x.aria2 are 0600 but never served.
    assert _peer_serve.worker_access_problems(tree, ["kimi/c1", "kimi/not-yet", "new/c2"], NOBODY) == []


@pytest.mark.parametrize("rel, mode, need", [
    ("", 0o700, "traverse"),                        # the models root itself
    ("kimi", 0o750, "traverse"),                    # the model directory
    ("kimi/c1", 0o700, "traverse"),                 # the commit directory (umask 077)
    ("kimi/c1/sub", 0o700, "traverse"),             # a directory inside it
    ("kimi/c1/sub/w.safetensors", 0o600, "read"),   # a served file
    ("kimi/c1/.gpufleet", 0o700, "traverse"),       # the status the peers poll
    ("kimi/c1/.gpufleet/peer-status.json", 0o640, "read"),
])
def test_what_nobody_cannot_reach_is_named_with_its_mode(tree, rel, mode, need):
    path = os.path.join(tree, rel) if rel else tree
    os.chmod(path, mode)
    problems = _peer_serve.worker_access_problems(tree, ["kimi/c1"], NOBODY)
    assert [(p["path"], p["mode"], p["need"].split()[0]) for p in problems][:1] == [(path, "%04o" % mode, need)]
    with pytest.raises(ModuleFailure) as exc:
        _peer_serve.check_worker_access(tree, ["kimi/c1"], NOBODY)
    assert path in exc.value.msg and "mode %04o" % mode in exc.value.msg and "chmod" in exc.value.msg


def test_group_and_owner_bits_count_for_the_worker(tree):
    commit = os.path.join(tree, "kimi", "c1")
    os.chmod(commit, 0o750)
    os.chown(commit, 0, 65534)
    assert _peer_serve.worker_access_problems(tree, ["kimi/c1"], NOBODY) == []
    os.chmod(commit, 0o700)
    os.chown(commit, 65534, 0)
    assert _peer_serve.worker_access_problems(tree, ["kimi/c1"], NOBODY) == []
