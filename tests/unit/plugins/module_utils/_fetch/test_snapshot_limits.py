# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 20 item 13: a path the filesystem cannot take (PATH_MAX, NAME_MAX) is refused by the listing
checks, before anything is written, instead of failing late with ENAMETOOLONG and leaving
progress.json in the fetching state. Real aria2c against the lab Hub's hostile-listing control."""
from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._common import paths as _paths
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _snapshot_staging

TARGET = "gpufleet-lab/Kimi-K2.6-mini"


def run(hub, dest, **params):
    base = dict(repo_id=TARGET, revision="main", dest=str(dest), endpoint=hub.api, min_free_bytes=0,
                retry_wait=1, connections=4, splits=4, min_split_size="1M", max_tries=3)
    base.update(params)
    return _snapshot.snapshot(base)


def relative_of(length):
    """A relative path of exactly ``length`` bytes, in components of at most 200 bytes."""
    count = -(-(length + 1) // 201)
    letters = length - (count - 1)
    sizes = [letters // count + (1 if i < letters % count else 0) for i in range(count)]
    rel = "/".join("p" * size for size in sizes)
    assert len(rel) == length and max(sizes) <= 200 and min(sizes) >= 1, (len(rel), length)
    return rel


def deep(base, length):
    """An absolute path under ``base`` of exactly ``length`` bytes (not created)."""
    path = os.path.join(str(base), relative_of(length - len(str(base)) - 1))
    assert len(path) == length
    return path


def nothing_under(tmp_path):
    return sorted(os.listdir(str(tmp_path)))


def test_remote_path_over_path_max_is_refused_before_anything_is_written(lab_hub, aria2c, tmp_path):
    dest = os.path.join(os.path.realpath(str(tmp_path)), "d")
    # dest + "/" + path: one byte over PATH_MAX's 4095; each component is fine (<= 255)
    rel = relative_of(4096 - len(dest) - 1)
    lab_hub.call("POST", "/_lab/listing", {"repos": {TARGET: {"files": {"config.json": {"path": rel}}}}})
    before = nothing_under(tmp_path)
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest, allow_patterns=["p*", "config.json"])
    msg = err.value.msg
    assert "PATH_MAX" in msg and "4095 bytes" in msg and "4096 bytes long" in msg, msg
    assert "(%d characters)" % (4096 - 100) in msg, "the path is named, shortened: %s" % msg
    assert len(msg) < 2000
    assert nothing_under(tmp_path) == before and not os.path.lexists(dest), "dest was created for a refused listing"
    assert not [e for e in lab_hub.log() if "/resolve/" in e["path"]] and not lab_hub.log(server="cdn")


def test_remote_path_that_fits_exactly_is_taken():
    dest = "/tmp"
    rel = relative_of(4095 - len(dest) - 1)
    assert len(_paths.dest_path(dest, rel)) == 4095
    with pytest.raises(_paths.PathTooLongError, match="PATH_MAX"):
        _paths.dest_path(dest, rel + "x")


def test_dest_too_long_for_the_staging_names_is_refused_before_anything_is_written(lab_hub, aria2c, tmp_path):
    """dest/config.json fits, but dest/.gpufleet/staging/<sha256>.direct does not: the first fetch would
    have failed with ENAMETOOLONG after progress.json said fetching."""
    staging_room = len("/.gpufleet/staging/") + len(_snapshot_staging.LONGEST_STAGED)
    dest = deep(os.path.join(os.path.realpath(str(tmp_path)), "d"), 4095 - staging_room + 1)
    assert len(os.path.join(dest, "model-00001-of-000004.safetensors")) < 4095
    before = nothing_under(tmp_path)
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest, allow_patterns=["config.json", "*.safetensors"])
    msg = err.value.msg
    assert "refusing dest" in msg and "staging" in msg and "PATH_MAX" in msg and "shorter dest" in msg, msg
    assert "4096 bytes long" in msg, msg
    assert nothing_under(tmp_path) == before and not os.path.lexists(str(tmp_path / "d"))
    assert not lab_hub.log(server="cdn")


def test_dest_with_room_for_staging_still_lands(lab_hub, aria2c, tmp_path):
    """The boundary: one byte less and the run goes through (the check is not off by one)."""
    staging_room = len("/.gpufleet/staging/") + len(_snapshot_staging.LONGEST_STAGED)
    dest = deep(os.path.join(os.path.realpath(str(tmp_path)), "d"), 4095 - staging_room)
    res = run(lab_hub, dest, allow_patterns=["config.json", "model-00001-*"])
    assert res["changed"] and os.path.isfile(os.path.join(dest, "model-00001-of-000004.safetensors"))


def test_component_over_name_max_of_the_filesystem(monkeypatch, tmp_path):
    """NAME_MAX comes from os.pathconf (a filesystem may take fewer than 255 bytes, eCryptfs 143)."""
    real = os.pathconf

    def pathconf(path, name):
        return 143 if name == "PC_NAME_MAX" else real(path, name)

    monkeypatch.setattr(os, "pathconf", pathconf)
    assert _paths.limits(str(tmp_path / "not" / "yet"))[1] == 143
    _paths.dest_path(str(tmp_path), "a" * 143)
    with pytest.raises(_paths.PathTooLongError, match="NAME_MAX") as err:
        _paths.dest_path(str(tmp_path), "sub/" + "a" * 144)
    assert "144 bytes" in str(err.value) and "143 bytes" in str(err.value)


def test_limits_fall_back_to_linux_values(monkeypatch, tmp_path):
    def broken(path, name):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "pathconf", broken)
    assert _paths.limits(str(tmp_path)) == (4096, 255)
