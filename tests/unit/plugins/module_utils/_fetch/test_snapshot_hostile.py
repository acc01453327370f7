# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A hostile or broken Hub (issue 10, items 1 and 7): real aria2c against the lab Hub's
hostile-listing control (tests/lab/hub/README.md, "Hostile listing"), no mock of huggingface_hub.

Every case must end in one SnapshotError that names the repo/file and says the endpoint is not to
be trusted, after ONE listing (no retries), with nothing deleted or written outside dest."""
from __future__ import annotations

import os
import random

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._common import paths as _paths
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _snapshot_plan

TARGET = "gpufleet-lab/Kimi-K2.6-mini"
GATED = "gpufleet-lab/Kimi-K2.6-mini-gated"
TOKEN_READER = "hf_labREADERfakeTOKENnotAsecret000001"
SHARD1 = "model-00001-of-000004.safetensors"
VICTIM = b"precious bytes outside dest\n"


def run(hub, dest, **params):
    base = dict(repo_id=TARGET, revision="main", dest=str(dest), endpoint=hub.api, min_free_bytes=0,
                retry_wait=1, connections=4, splits=4, min_split_size="1M", max_tries=3)
    base.update(params)
    return _snapshot.snapshot(base)


def lie(hub, repo=TARGET, **spec):
    """Make the lab Hub's listing of ``repo`` lie (files={path: {oid|lfs_oid|path|size: value}}, omit_sha, leak_token)."""
    return hub.call("POST", "/_lab/listing", {"repos": {repo: spec}})


def outside(tmp_path):
    """Everything under tmp_path except dest ("d"): what a run must never touch."""
    found = {}
    for root, dirs, names in os.walk(str(tmp_path)):
        if root == str(tmp_path):
            dirs[:] = [d for d in dirs if d != "d"]
        for name in dirs + names:
            path = os.path.join(root, name)
            with_bytes = os.path.isfile(path) and not os.path.islink(path)
            found[os.path.relpath(path, str(tmp_path))] = open(path, "rb").read() if with_bytes else None
    return found


def listings(hub):
    """How many times the revision was asked for (one per listing try)."""
    return len([e for e in hub.log(server="api") if e["path"].startswith("/api/models/") and "/tree/" not in e["path"]])


@pytest.fixture
def victim(tmp_path):
    (tmp_path / "victim").write_bytes(VICTIM)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "victim").write_bytes(VICTIM)
    return outside(tmp_path)


@pytest.mark.parametrize("files,words", [
    # LFS sha256 that walks out of staging: today's main deleted the victim (a leftover that did not hash)
    ({SHARD1: {"lfs_oid": "../../../victim"}}, ["lfs.oid", SHARD1, "'../../../victim'"]),
    ({SHARD1: {"lfs_oid": "../../../x/victim"}}, ["lfs.oid", SHARD1]),
    ({SHARD1: {"lfs_oid": "A" * 64}}, ["lfs.oid", "64 lowercase hex"]),
    ({SHARD1: {"lfs_oid": None}}, ["lfs.oid", "None"]),
    # git blob id with a path in it: today's main let aria2 write the server's bytes outside dest
    ({"config.json": {"oid": "x/../../../../victim"}}, ["oid", "config.json", "40 lowercase hex"]),
    ({"config.json": {"oid": "x/../../../../written-outside"}}, ["oid", "config.json"]),
    ({"config.json": {"oid": "e" * 39}}, ["oid", "config.json"]),
    ({"config.json": {"oid": 12345}}, ["oid", "12345"]),
    ({"config.json": {"size": -1}}, ["size", "config.json"]),
    # paths: relative, normalized, no NUL or backslash
    ({"config.json": {"path": "../../x/victim"}}, ["unsafe path", "'../../x/victim'"]),
    ({"config.json": {"path": "x/../../y"}}, ["unsafe path", "'x/../../y'"]),
    ({"config.json": {"path": "/etc/cron.d/x"}}, ["unsafe path", "absolute"]),
    ({"config.json": {"path": "a\\..\\..\\victim"}}, ["unsafe path", "backslash"]),
    ({"config.json": {"path": "a/\u0000/b"}}, ["unsafe path", "NUL"]),
    ({"config.json": {"path": "./config.json"}}, ["unsafe path"]),
    ({"config.json": {"path": "n" * 256}}, ["unsafe path", "longer than 255 bytes"]),
    # fields missing: huggingface_hub's entry parsing raised KeyError, a traceback from the module
    ({"config.json": {"drop": ["size"]}}, ["malformed", "KeyError", "size"]),
    ({SHARD1: {"drop": ["lfs.oid"]}}, ["malformed", "KeyError", "oid"]),
    ({"config.json": {"drop": ["path"]}}, ["malformed", "KeyError"]),
    # what no git tree holds, and placing would crash on: a path twice, a file that is also a folder
    ({"config.json": {"path": "README.md"}}, ["'README.md' twice"]),
    ({"config.json": {"path": "README.md/config.json"}}, ["'README.md' both as a file and as a folder"]),
])
def test_hostile_listing_is_refused_at_once(lab_hub, aria2c, tmp_path, victim, files, words):
    lie(lab_hub, files=files)
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, tmp_path / "d")
    assert outside(tmp_path) == victim, "something outside dest was written or deleted"
    msg = err.value.msg
    for word in words + [TARGET, lab_hub.api, "untrusted", "not retried"]:
        assert word in msg, (word, msg)
    assert not (tmp_path / "d").exists(), "dest was created for a listing that was refused"
    assert listings(lab_hub) == 1, "a hostile answer was retried"
    assert not [e for e in lab_hub.log() if "/resolve/" in e["path"] or e["server"] == "cdn"]


def test_hostile_ids_after_a_good_run_touch_nothing(lab_hub, aria2c, tmp_path, victim):
    """An existing dest (manifest, staging leftovers) and a listing that turns hostile on the update."""
    dest = tmp_path / "d"
    run(lab_hub, dest, allow_patterns=["*.json"], revision="v1.0")
    before = {name: (dest / name).read_bytes() for name in os.listdir(dest) if (dest / name).is_file()}
    lab_hub.reset()
    lie(lab_hub, files={SHARD1: {"lfs_oid": "../../../victim"}, "config.json": {"oid": "x/../../../../written-outside"}})
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest)
    assert outside(tmp_path) == victim
    assert "untrusted" in err.value.msg
    assert {name: (dest / name).read_bytes() for name in before} == before


def test_dest_meta_dir_that_is_a_symlink_is_refused(lab_hub, aria2c, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = tmp_path / "d"
    dest.mkdir()
    os.symlink(str(elsewhere), str(dest / ".gpufleet"))
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest, allow_patterns=["config.json"])
    assert str(dest / ".gpufleet") in err.value.msg and "symlink" in err.value.msg
    assert os.listdir(str(elsewhere)) == []
    assert not (dest / "config.json").exists()


def test_staging_dir_that_is_a_symlink_is_refused(lab_hub, aria2c, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = tmp_path / "d"
    (dest / ".gpufleet").mkdir(parents=True)
    os.symlink(str(elsewhere), str(dest / ".gpufleet" / "staging"))
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest, allow_patterns=["config.json"])
    assert "staging" in err.value.msg and "symlink" in err.value.msg
    assert os.listdir(str(elsewhere)) == []
    assert not (dest / "config.json").exists()


def test_mirror_without_sha_fails_at_once(lab_hub, aria2c, tmp_path):
    lie(lab_hub, omit_sha=True)
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, tmp_path / "d")
    assert "no 40-hex commit sha" in err.value.msg and "'main'" in err.value.msg and TARGET in err.value.msg
    assert listings(lab_hub) == 1
    assert not (tmp_path / "d").exists()


def test_token_in_a_redirect_is_a_clear_failure(lab_hub, aria2c, tmp_path):
    """A Hub that puts the token into the signed URL: refused, reported, never handed to aria2."""
    lie(lab_hub, repo=GATED, leak_token=True)
    dest = tmp_path / "g"
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest, repo_id=GATED, token=TOKEN_READER, allow_patterns=[SHARD1])
    assert "contains the token" in err.value.msg and "Nothing was handed to aria2" in err.value.msg
    assert TOKEN_READER not in err.value.msg and TOKEN_READER not in repr(err.value.fail_kwargs())
    assert not any(e["server"] == "cdn" for e in lab_hub.log())
    assert not (dest / SHARD1).exists()


@pytest.mark.parametrize("path", ["", "/a", "a/../b", "..", "a//b", "a/./b", "a\\b", "a\x00b", None, 5, "a/" + "\u00e9" * 128])
def test_check_relative_refuses(path):
    with pytest.raises(_paths.UnsafePathError):
        _paths.check_relative(path)


def test_check_relative_accepts_plain_paths():
    assert _paths.check_relative("original/config.json") == ["original", "config.json"]
    assert _paths.check_relative("..hidden/a..b") == ["..hidden", "a..b"]


class _Entry(object):
    """One tree entry as huggingface_hub hands it over (RepoFile's attributes)."""

    def __init__(self, path, size, blob_id, sha256):
        self.path, self.size, self.blob_id = path, size, blob_id
        self.lfs = None if sha256 is False else type("Lfs", (), {"sha256": sha256})()


class _Api(object):
    def __init__(self, entries):
        self.entries = entries

    def list_repo_tree(self, repo_id, revision, repo_type, recursive):  # pylint: disable=unused-argument
        return iter(self.entries)


_PIECES = ["..", ".", "", "/", "\\", "\x00", "a", "b", "x" * 300, "-", "\u00e9", "e" * 40, "f" * 64, "A" * 40, " ", "~"]


def _fuzz_value(rng, kind):
    if rng.random() < 0.5:  # near-valid: right length, one hostile character or piece
        good = "".join(rng.choice("0123456789abcdef") for dummy in range({"blob": 40, "sha": 64}.get(kind, 8)))
        if rng.random() < 0.5:
            return good
        at = rng.randrange(len(good))
        return good[:at] + rng.choice(_PIECES) + good[at + 1:]
    if rng.random() < 0.1:
        return rng.choice([None, 5, -1, 1.5, True, [], {}])
    return "".join(rng.choice(_PIECES) for dummy in range(rng.randint(0, 6)))


def test_fuzz_listing_ids_and_paths(tmp_path):
    """5000 random listings (fixed seed): each is refused as untrusted, or every name it yields stays inside."""
    rng = random.Random(10)
    root = str(tmp_path / "d")
    staging = os.path.join(root, ".gpufleet", "staging")
    os.makedirs(staging)
    accepted = refused = 0
    for dummy in range(5000):
        entries = []
        for dummy2 in range(rng.randint(1, 4)):
            path = "config.json" if rng.random() < 0.3 else _fuzz_value(rng, "path")
            size = rng.choice([0, 7, -3, None, "7", 2 ** 40])
            entries.append(_Entry(path, size, _fuzz_value(rng, "blob"), rng.choice([False, _fuzz_value(rng, "sha")])))
        try:
            files = _hub.list_revision(_Api(entries), TARGET, "c" * 40)
        except _hub.UntrustedAnswerError:
            refused += 1
            continue
        accepted += 1
        for remote in files:
            final = _paths.dest_path(root, remote.path)
            assert final.startswith(os.path.realpath(root) + os.sep)
            key = _snapshot_plan.content_key(remote)
            assert os.path.dirname(os.path.normpath(os.path.join(staging, key))) == staging, key
    assert accepted > 50 and refused > 1000, (accepted, refused)  # both sides exercised
