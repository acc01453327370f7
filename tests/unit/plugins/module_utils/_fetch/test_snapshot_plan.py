# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_snapshot_plan: present / link / fetch decisions on real files and real manifests, no Hub."""
from __future__ import annotations

import hashlib
import os

from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _snapshot_plan
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import snapshot_files as sf

SHARD = b"shard-bytes " * 700
OTHER = b"other-bytes " * 500
CONFIG = b'{"model_type": "x"}\n'


def hashed_paths(monkeypatch):
    """Record which files plan() hashes (the real hash still runs)."""
    seen = []
    real = _snapshot_plan.verify_local

    def spy(path, remote):
        seen.append(os.path.basename(path))
        return real(path, remote)

    monkeypatch.setattr(_snapshot_plan, "verify_local", spy)
    return seen


def test_recorded_file_is_present_without_hashing(tmp_path, monkeypatch):
    item = sf.item_for(tmp_path, "a.safetensors", SHARD)
    sf.write(tmp_path, "a.safetensors", SHARD)
    manifest = sf.write_manifest(tmp_path, {"a.safetensors": sf.record(item.final, item.remote)})
    seen = hashed_paths(monkeypatch)
    _snapshot_plan.plan([item], manifest)
    assert item.action == "present" and seen == []
    assert item.sha256 == hashlib.sha256(SHARD).hexdigest()
    assert item.stat == manifest["files"]["a.safetensors"]["stat"]


def test_stale_stat_is_hashed_again(tmp_path, monkeypatch):
    good = sf.item_for(tmp_path, "good.safetensors", SHARD)
    bad = sf.item_for(tmp_path, "bad.safetensors", OTHER)
    sf.write(tmp_path, "good.safetensors", SHARD)
    sf.write(tmp_path, "bad.safetensors", OTHER)
    manifest = sf.write_manifest(tmp_path, {rel: sf.record(it.final, it.remote)
                                            for rel, it in (("good.safetensors", good), ("bad.safetensors", bad))})
    old_stat = manifest["files"]["good.safetensors"]["stat"]
    # good: touched (mtime moved), bytes unchanged; bad: same size, other bytes, mtime moved too
    st = os.stat(good.final)
    os.utime(good.final, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    sf.write(tmp_path, "bad.safetensors", b"\0" * len(OTHER))
    seen = hashed_paths(monkeypatch)
    _snapshot_plan.plan([good, bad], manifest)
    assert sorted(seen) == ["bad.safetensors", "good.safetensors"]
    assert good.action == "present" and good.stat == _manifest.stat_record(good.final) != old_stat
    assert bad.action == "fetch" and bad.error == "differs from the Hub's copy" and bad.stat is None


def test_unrecorded_files_decided_by_their_bytes(tmp_path):
    corrupt = sf.item_for(tmp_path, "corrupt.safetensors", SHARD)
    sf.write(tmp_path, "corrupt.safetensors", b"\xff" * len(SHARD))  # same size, other bytes
    config = sf.item_for(tmp_path, "config.json", CONFIG, lfs=False)
    sf.write(tmp_path, "config.json", CONFIG)
    missing = sf.item_for(tmp_path, "sub/missing.safetensors", OTHER)
    linked = sf.item_for(tmp_path, "symlinked.safetensors", OTHER)
    os.symlink(sf.write(tmp_path / "elsewhere", "x", OTHER), linked.final)  # right bytes, not a regular file
    _snapshot_plan.plan([corrupt, config, missing, linked], None, workers=2)
    assert corrupt.action == "fetch" and corrupt.error == "differs from the Hub's copy"
    # a non-LFS file: checked by its git blob id, its sha256 computed and recorded
    assert config.action == "present" and config.sha256 == hashlib.sha256(CONFIG).hexdigest()
    assert config.stat == _manifest.stat_record(config.final)
    assert missing.action == "fetch" and missing.error is None
    assert linked.action == "fetch"


def test_link_from_an_earlier_revision(tmp_path):
    v1 = tmp_path / "v1"
    shard_v1 = sf.write(v1, "a.safetensors", SHARD)
    config_v1 = sf.write(v1, "config.json", CONFIG)
    gone = sf.write(v1, "gone.safetensors", OTHER)
    records = {"a.safetensors": sf.record(shard_v1, sf.remote_for("a.safetensors", SHARD)),
               "config.json": sf.record(config_v1, sf.remote_for("config.json", CONFIG, lfs=False)),
               "gone.safetensors": sf.record(gone, sf.remote_for("gone.safetensors", OTHER))}
    sf.write_manifest(v1, records)
    os.unlink(gone)
    dest = tmp_path / "v2"
    # renamed in the new revision: the content, not the path, finds the source
    shard = sf.item_for(dest, "renamed.safetensors", SHARD)
    config = sf.item_for(dest, "config.json", CONFIG, lfs=False)
    other = sf.item_for(dest, "gone.safetensors", OTHER)
    new = sf.item_for(dest, "new.safetensors", b"new" * 100)
    _snapshot_plan.plan([shard, config, other, new], None, link_from=[str(v1), str(tmp_path / "no-such-dir")])
    assert shard.action == "link" and shard.source == (shard_v1, records["a.safetensors"])
    assert config.action == "link" and config.source[0] == config_v1
    assert other.action == "fetch" and other.source is None  # listed there, but the file is gone
    assert new.action == "fetch"


def test_link_candidates_skip_unusable_manifests(tmp_path):
    sf.write(tmp_path / "bad" / ".gpufleet", "manifest.json", b"not json")
    sf.write_manifest(tmp_path / "evil", {"../outside": {"size": 1, "hub_id": "h", "sha256": "s"}})
    assert _snapshot_plan.link_candidates([str(tmp_path / "bad"), str(tmp_path / "evil"), str(tmp_path / "none")]) == {}


def test_content_key_and_unique_fetches(tmp_path):
    a = sf.item_for(tmp_path, "a.safetensors", SHARD)
    b = sf.item_for(tmp_path, "copy/a.safetensors", SHARD)
    c = sf.item_for(tmp_path, "c.json", CONFIG, lfs=False)
    assert a.key == b.key == hashlib.sha256(SHARD).hexdigest()
    assert c.key == "blob-" + c.remote.blob_id and _snapshot_plan.hub_id(c.remote) == c.remote.blob_id
    for item in (a, b, c):
        item.action = "fetch"
    assert list(_snapshot_plan.unique_fetches([a, b, c]).values()) == [a, c]


def test_disk_figures_count_what_staging_already_holds(tmp_path):
    dest = tmp_path / "not" / "yet"
    staging = tmp_path / "staging"
    big = sf.item_for(dest, "big.safetensors", SHARD)
    small = sf.item_for(dest, "small.json", CONFIG, lfs=False)
    sf.write(staging, big.key, SHARD[:1000])  # an earlier run's partial
    disk = _snapshot_plan.disk_figures(str(dest), to_fetch={big.key: big, small.key: small}, staging=str(staging),
                                       min_free_bytes=123)
    assert disk["needed_bytes"] == len(SHARD) - 1000 + len(CONFIG)
    assert disk["filesystem"] == str(tmp_path) and disk["min_free_bytes"] == 123
    free, probe = _snapshot_plan.free_bytes(str(dest))
    assert probe == str(tmp_path) and abs(disk["free_bytes"] - free) < 1 << 30
