# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 20 item 6 (directories): under a hardened umask (027, 077) every directory the peer server
must traverse or read is made 0755 and every landed file is 0644, so nginx's workers (another user)
can serve them; staging stays 0700. A real snapshot() with real aria2c against the lab Hub."""
from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._common import paths as _paths
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _snapshot_staging
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import snapshot_files as sf

TARGET = "gpufleet-lab/Kimi-K2.6-mini"
PEER_TOKEN = "peerTOKENfakeNOTaSECRET0000000001"


def mode(path):
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


@pytest.fixture(params=[0o077, 0o027])
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_snapshot_under_a_hardened_umask_is_readable_by_the_peer_server(lab_hub, aria2c, tmp_path, umask):
    root = tmp_path / "models"  # the models root, <name>/ and <commit>/: none exists yet
    dest = root / "kimi" / "c0ffee"
    res = _snapshot.snapshot(dict(
        repo_id=TARGET, revision="main", dest=str(dest), endpoint=lab_hub.api, min_free_bytes=0, retry_wait=0,
        connections=2, splits=2, min_split_size="1M", peers=[], peer_token=PEER_TOKEN,
        allow_patterns=["config.json", "model-00001-*", "tokenizer_config.json"]))
    assert res["changed"]
    for folder in (root, root / "kimi", dest):
        assert mode(folder) == 0o755, (str(folder), oct(mode(folder)), oct(umask))
    for row in res["files"]:
        assert mode(dest / row["path"]) == 0o644, (row["path"], oct(mode(dest / row["path"])))
    meta = dest / ".gpufleet"
    assert mode(meta) == 0o755, oct(mode(meta))
    # what the peers read: peer-status.json through .gpufleet
    assert mode(meta / "peer-status.json") == 0o644
    with open(str(meta / "peer-status.json")) as handle:
        assert json.load(handle)["state"] == "done"
    assert mode(meta / "manifest.json") == 0o644
    assert not os.path.lexists(str(meta / "staging"))  # removed after a clean run


def test_staging_stays_private_under_any_umask(tmp_path):
    old = os.umask(0o002)
    try:
        staging = _snapshot_staging.make_staging(str(tmp_path / "d"))
    finally:
        os.umask(old)
    assert mode(staging) == 0o700
    assert mode(tmp_path / "d" / ".gpufleet") == 0o755


def test_placed_file_gets_0755_subfolders_only_where_it_made_them(tmp_path, umask):
    """place(): the folders of a repo subfolder are made 0755; an existing folder keeps its owner's mode."""
    dest = tmp_path / "d"
    dest.mkdir(mode=0o755)
    (dest / "kept").mkdir()
    os.chmod(str(dest / "kept"), 0o750)
    staging = _snapshot_staging.make_staging(str(dest))
    for rel in ("original/sub/tokenizer.model", "kept/new/config.json"):
        data = rel.encode()
        item = sf.item_for(dest, rel, data)
        staged = os.path.join(staging, item.key)
        with open(staged, "wb") as handle:  # as aria2 makes it: under the process umask
            handle.write(data)
        assert mode(staged) == 0o666 & ~umask
        _snapshot_staging.place(item, staged, str(dest))
        assert mode(dest / rel) == 0o644
    assert mode(dest / "original") == 0o755 and mode(dest / "original" / "sub") == 0o755
    assert mode(dest / "kept") == 0o750, "an existing folder was chmodded"
    assert mode(dest / "kept" / "new") == 0o755


def test_make_dirs_is_makedirs_with_a_fixed_mode(tmp_path, umask):
    made = _paths.make_dirs(str(tmp_path / "a" / "b" / "c"))
    assert made == [str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(tmp_path / "a" / "b" / "c")]
    assert all(mode(path) == 0o755 for path in made)
    assert _paths.make_dirs(str(tmp_path / "a" / "b" / "c")) == []
    (tmp_path / "f").write_text("x")
    with pytest.raises(FileExistsError):
        _paths.make_dirs(str(tmp_path / "f"))


def test_an_existing_private_meta_dir_gets_traversable(tmp_path):
    """A .gpufleet an earlier run made 0700 (umask 077 before this fix): nginx could not reach peer-status.json."""
    meta = tmp_path / "d" / ".gpufleet"
    meta.mkdir(parents=True)
    os.chmod(str(meta), 0o700)
    with _manifest.DirLock(str(tmp_path / "d")):
        pass
    assert mode(meta) == 0o711
