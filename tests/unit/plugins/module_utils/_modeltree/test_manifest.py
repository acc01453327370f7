# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import json
import multiprocessing
import os

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as m


def test_manifest_round_trip_and_atomic_write(tmp_path):
    files = {"config.json": {"size": 3, "sha256": "ab" * 32, "hub_id": "cd" * 20, "lfs": False, "stat": None}}
    man = m.new_manifest("org/repo", "model", "main", "ef" * 20, "http://hub", files)
    m.write_manifest(str(tmp_path), man)
    assert m.read_manifest(str(tmp_path)) == man
    # No temp files left beside it.
    assert sorted(os.listdir(tmp_path / ".gpufleet")) == ["manifest.json"]


def test_missing_manifest_is_none_and_foreign_file_is_an_error(tmp_path):
    assert m.read_manifest(str(tmp_path)) is None
    (tmp_path / ".gpufleet").mkdir()
    (tmp_path / ".gpufleet" / "manifest.json").write_text(json.dumps({"files": {}}))
    with pytest.raises(m.ManifestError, match="not a gpufleet.llm format-1"):
        m.read_manifest(str(tmp_path))
    (tmp_path / ".gpufleet" / "manifest.json").write_text("{not json")
    with pytest.raises(m.ManifestError, match="cannot be read"):
        m.read_manifest(str(tmp_path))


def test_manifest_that_is_a_fifo_or_a_device_fails_at_once(tmp_path):
    """Read through the one capped reader (_jsonfile): a FIFO would block open() for ever, a link to
    /dev/zero would read without end."""
    meta = tmp_path / ".gpufleet"
    meta.mkdir()
    os.mkfifo(meta / "manifest.json")
    with pytest.raises(m.ManifestError, match="cannot be read: it is a FIFO"):
        m.read_manifest(str(tmp_path))
    (meta / "manifest.json").unlink()
    (meta / "manifest.json").symlink_to("/dev/zero")
    # a manifest given by path (model_verify's manifest option) may be a link: the reader still stops
    with pytest.raises(m.ManifestError, match="character device"):
        m.read_json(str(meta / "manifest.json"), "manifest")
    # the one in .gpufleet/ is never followed (issue 20 item 5)
    with pytest.raises(m.SymlinkedMetaError, match="manifest.json is a symlink"):
        m.read_manifest(str(tmp_path))


def test_stat_record_notices_touch_rewrite_and_replace(tmp_path):
    f = tmp_path / "shard"
    f.write_bytes(b"x" * 10)
    rec = m.stat_record(str(f))
    assert m.same_stat(rec, str(f))
    os.utime(f, ns=(rec["mtime_ns"] + 1, rec["mtime_ns"] + 1))
    assert not m.same_stat(rec, str(f))
    rec = m.stat_record(str(f))
    (tmp_path / "new").write_bytes(b"y" * 10)
    os.utime(tmp_path / "new", ns=(rec["mtime_ns"], rec["mtime_ns"]))
    os.replace(tmp_path / "new", f)  # same size and mtime, other inode
    assert not m.same_stat(rec, str(f))
    assert not m.same_stat(rec, str(tmp_path / "gone"))
    assert not m.same_stat(None, str(f))


def test_one_stat_record_carries_ctime(tmp_path):
    f = tmp_path / "shard"
    f.write_bytes(b"x" * 10)
    rec = m.stat_record(str(f))
    # Issue 10 item 9: hf_snapshot's records (manifest) and model_verify's (stat cache) are the same
    # record, ctime_ns included (it used to be model_verify's alone); dev is kept but not compared.
    assert sorted(rec) == sorted(m.STAT_KEYS + ("dev",)) and "ctime_ns" in m.STAT_KEYS and "dev" not in m.STAT_KEYS
    assert rec["ctime_ns"] == os.stat(f).st_ctime_ns and rec["dev"] == os.stat(f).st_dev
    assert m.same_stat(rec, str(f)) and m.stat_matches(rec, rec)


def test_ctime_moved_is_not_the_same_stat(tmp_path):
    f = tmp_path / "shard"
    f.write_bytes(b"x" * 10)
    full = m.stat_record(str(f))
    # The file's ctime differs from the record's while size, mtime and inode agree: what a
    # rewrite with its mtime restored leaves. (The record is moved, not the clock: no timing in tests.)
    older = dict(full, ctime_ns=full["ctime_ns"] - 1)
    assert not m.same_stat(older, str(f))
    assert not m.stat_matches(older, full) and not m.stat_matches(full, dict(full, ctime_ns=full["ctime_ns"] + 1))
    # Issue 10 item 10: a record without ctime (an old manifest's) vouches for nothing now; it used
    # to vouch on size, mtime, inode and device alone.
    plain = {k: v for k, v in full.items() if k != "ctime_ns"}
    assert not m.same_stat(plain, str(f)) and not m.stat_matches(plain, full)


def test_stat_matches_needs_a_record():
    now = {"size": 1, "mtime_ns": 2, "ino": 3, "dev": 4, "ctime_ns": 5}
    assert not m.stat_matches(None, now) and not m.stat_matches({}, now) and not m.stat_matches("x", now)
    assert not m.stat_matches(dict(now, size=9), now) and not m.stat_matches(dict(now, ino=9), now)
    # Issue 10 item 15: a remount may change st_dev alone; that no longer sends the file to hashing.
    assert m.stat_matches(dict(now, dev=9), now)
    assert not m.same_stat({}, "/nonexistent") and not m.same_stat("x", "/nonexistent")


def test_read_json_is_public_and_checks_the_format(tmp_path):
    path = tmp_path / "x.json"
    assert m.read_json(str(path), "thing") is None
    path.write_text(json.dumps({"format": m.FORMAT, "a": 1}))
    assert m.read_json(str(path), "thing") == {"format": m.FORMAT, "a": 1}
    path.write_text(json.dumps({"format": m.FORMAT + 1}))
    with pytest.raises(m.ManifestError, match="thing .* is not a gpufleet.llm format-1 file"):
        m.read_json(str(path), "thing")


def test_statcache_round_trip(tmp_path):
    assert m.read_statcache(str(tmp_path)) == {}
    m.write_statcache(str(tmp_path), {"a": {"size": 1, "sha256": "00"}})
    assert m.read_statcache(str(tmp_path)) == {"a": {"size": 1, "sha256": "00"}}


def _hold_lock(dest, ready, release):
    with m.DirLock(dest):
        ready.set()
        release.wait(60)  # held until the test says so (bounded: the process always ends)


def test_dir_lock_excludes_another_process_then_releases(tmp_path):
    ready, release = multiprocessing.Event(), multiprocessing.Event()
    proc = multiprocessing.Process(target=_hold_lock, args=(str(tmp_path), ready, release))
    proc.start()
    try:
        assert ready.wait(10)
        with pytest.raises(m.LockTimeout, match="locked by another run"):
            with m.DirLock(str(tmp_path), timeout=0.2):
                pass
        release.set()
        with m.DirLock(str(tmp_path), timeout=30):
            pass  # acquired once the holder exits
    finally:
        release.set()
        proc.join(10)
