# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 10 items 8, 9, 10 and 15 (st_dev): when a stat record may vouch for a file's bytes.

A record vouches only with ctime_ns (a same-size rewrite with its mtime put back moves ctime), never
because of st_dev (a remount changes it), and the module's own links neither make records stale nor
change the mode of an inode an earlier revision serves. The end-to-end cases run hf_snapshot with real
aria2c against the lab Hub on loopback (tests/unit/plugins/conftest.py), then model_verify."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _snapshot_plan
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _snapshot_staging
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import verify as _verify
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import snapshot_files as sf

TARGET = "gpufleet-lab/Kimi-K2.6-mini"
SHARD2 = "model-00002-of-000004.safetensors"
DATA = b"weights " * 1000


def sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def rewrite_keeping_stat(path):
    """Same-size rewrite in place with atime and mtime put back: only ctime tells."""
    st = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(st.st_size // 2)
        old = handle.read(8)
        handle.seek(st.st_size // 2)
        handle.write(bytes(b ^ 0xFF for b in old))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    # Kernels before multigrain timestamps (Linux < 6.13) stamp ctime from a coarse clock: a rewrite
    # in the same tick as the last change leaves ctime as it was. Touch the inode again until the
    # tick has moved (bounded: a tick is a few ms), so the premise holds on every kernel.
    for dummy in range(1_000_000):
        if os.stat(path).st_ctime_ns != st.st_ctime_ns:
            break
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = os.stat(path)
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    assert now.st_ctime_ns != st.st_ctime_ns, "ctime did not move: the test's premise does not hold"


def fetch(hub, dest, **params):
    base = dict(repo_id=TARGET, revision="main", dest=str(dest), endpoint=hub.api, min_free_bytes=0,
                retry_wait=1, connections=4, splits=4, min_split_size="1M")
    base.update(params)
    return _snapshot.snapshot(base)


# --- the rule (unit) ------------------------------------------------------------------------------

def test_a_record_without_ctime_vouches_for_nothing(tmp_path):
    path = sf.write(tmp_path, "a.safetensors", DATA)
    now = _manifest.stat_record(path)
    legacy = {k: now[k] for k in ("size", "mtime_ns", "ino", "dev")}  # a manifest written before item 9
    assert not _manifest.stat_matches(legacy, now) and not _manifest.same_stat(legacy, path)
    assert not _manifest.stat_matches(dict(now, ctime_ns=None), now)
    assert not _manifest.stat_matches(dict(now, ctime_ns=True), dict(now, ctime_ns=1))
    assert _manifest.same_stat(now, path)


def test_a_remount_that_changes_st_dev_alone_keeps_the_record(tmp_path):
    path = sf.write(tmp_path, "a.safetensors", DATA)
    rec = _manifest.stat_record(path)
    # What a remount (NFS, a renumbered NVMe or dm device) leaves: another st_dev, all else the same.
    assert _manifest.same_stat(dict(rec, dev=rec["dev"] + 1), path)
    assert _manifest.same_stat({k: v for k, v in rec.items() if k != "dev"}, path)
    for key in _manifest.STAT_KEYS:
        assert not _manifest.same_stat(dict(rec, **{key: rec[key] + 1}), path), key


def test_a_legacy_manifest_record_is_hashed_once_and_recorded_with_ctime(tmp_path, monkeypatch):
    item = sf.item_for(tmp_path, "a.safetensors", DATA)
    sf.write(tmp_path, "a.safetensors", DATA)
    record = sf.record(item.final, item.remote)
    del record["stat"]["ctime_ns"]
    manifest = sf.write_manifest(tmp_path, {"a.safetensors": record})
    seen = []
    real = _snapshot_plan.verify_local
    monkeypatch.setattr(_snapshot_plan, "verify_local", lambda path, remote: seen.append(path) or real(path, remote))
    _snapshot_plan.plan([item], manifest)
    assert seen == [item.final] and item.action == "present"
    assert item.stat == _manifest.stat_record(item.final) and "ctime_ns" in item.stat


def test_auto_hashes_a_tree_whose_manifest_records_have_no_ctime(trees):
    target, _drafter = trees
    manifest_path = os.path.join(target, ".gpufleet", "manifest.json")
    with open(manifest_path) as handle:
        manifest = json.load(handle)
    for entry in manifest["files"].values():
        if entry.get("stat"):
            entry["stat"].pop("ctime_ns", None)  # as an hf_snapshot before item 9 wrote it
    _manifest.write_manifest(target, manifest)
    first = _verify.verify(target, mode="auto")
    weights = sorted(rel for rel in first["hashed"] if rel.endswith(".safetensors"))
    assert first["ok"] and first["cached"] == 0 and len(weights) == 4
    # Hashed once, recorded with ctime: the next auto run hashes no weight file.
    again = _verify.verify(target, mode="auto")
    assert again["ok"] and again["cached"] == 4 and not any(rel.endswith(".safetensors") for rel in again["hashed"])


# --- the module's own links (item 8 and the hard-link half of item 9) -------------------------------

def test_linking_keeps_the_mode_of_the_served_inode(tmp_path):
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    source = sf.write(v1, "a.safetensors", DATA)
    os.chmod(source, 0o640)  # as the operator left the file `current` serves
    staging = _snapshot_staging.make_staging(str(v2))
    item = sf.item_for(v2, "a.safetensors", DATA)
    item.source = (source, sf.record(source, item.remote))
    assert _snapshot_staging.link_from_source(item, staging, str(v2))
    assert os.stat(item.final).st_ino == os.stat(source).st_ino
    assert os.stat(source).st_mode & 0o777 == 0o640
    # A file this run created is still made readable.
    fresh = sf.item_for(v2, "b.safetensors", DATA + b"b")
    staged = sf.write(staging, fresh.key, DATA + b"b")
    os.chmod(staged, 0o600)
    _snapshot_staging.place(fresh, staged, str(v2))
    assert os.stat(fresh.final).st_mode & 0o777 == 0o644


def test_names_linked_to_one_source_keep_records_that_hold(tmp_path, monkeypatch):
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    source = sf.write(v1, "a.safetensors", DATA)
    staging = _snapshot_staging.make_staging(str(v2))
    record = sf.record(source, sf.remote_for("a.safetensors", DATA))
    items = [sf.item_for(v2, rel, DATA) for rel in ("a.safetensors", "copy/a.safetensors", "b/a.safetensors")]
    seen = []
    real = _snapshot_plan.verify_local
    monkeypatch.setattr(_snapshot_plan, "verify_local", lambda path, remote: seen.append(path) or real(path, remote))
    for item in items:
        item.source = (source, record)
        assert _snapshot_staging.link_from_source(item, staging, str(v2))
    # Each link moved the inode's ctime; the records taken before it still hold, and the source was
    # never hashed: its record (in memory) followed the links.
    assert seen == [] and all(_manifest.same_stat(item.stat, item.final) and "ctime_ns" in item.stat for item in items)
    assert _manifest.same_stat(record["stat"], source)


def test_a_rollback_trusts_the_newer_revisions_record_of_the_same_inode(tmp_path, monkeypatch):
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    rels = ("a.safetensors", "b.safetensors")
    blobs = {"a.safetensors": DATA, "b.safetensors": DATA + b"b"}
    old = {rel: sf.record(sf.write(v1, rel, blobs[rel]), sf.remote_for(rel, blobs[rel])) for rel in rels}
    manifest = sf.write_manifest(v1, old)
    staging = _snapshot_staging.make_staging(str(v2))
    newer = {}
    for rel in rels:  # v2 linked from v1, as hf_snapshot does: v1's own records go stale
        item = sf.item_for(v2, rel, blobs[rel])
        item.source = (str(v1 / rel), json.loads(json.dumps(old[rel])))  # as read from v1's manifest
        assert _snapshot_staging.link_from_source(item, staging, str(v2))
        newer[rel] = dict(old[rel], stat=item.stat)
    sf.write_manifest(v2, newer)
    assert not any(_manifest.same_stat(old[rel]["stat"], str(v1 / rel)) for rel in rels)
    rewrite_keeping_stat(str(v1 / "b.safetensors"))  # and b changes behind everyone's back
    seen = []
    real = _snapshot_plan.verify_local
    monkeypatch.setattr(_snapshot_plan, "verify_local", lambda path, remote: seen.append(path) or real(path, remote))
    items = [sf.item_for(v1, rel, blobs[rel]) for rel in rels]
    _snapshot_plan.plan(items, manifest, link_from=[str(v2)])
    # Rolling back to v1 (link_from: v2, the revision `current` serves): a is the inode v2's record
    # holds for, so it is present unhashed; b's stat moved under both records, so its bytes decide.
    assert seen == [str(v1 / "b.safetensors")]
    assert [it.action for it in items] == ["present", "link"] and _manifest.same_stat(items[0].stat, items[0].final)
    # b is planned as a link to v2's b, which is checked when linked: the same changed inode, refused.
    assert not _snapshot_staging.link_from_source(items[1], staging, str(v1))


def test_duplicates_keep_the_first_record_true(tmp_path):
    dest = tmp_path / "d"
    staging = _snapshot_staging.make_staging(str(dest))
    first = sf.item_for(dest, "a.safetensors", DATA)
    _snapshot_staging.place(first, sf.write(staging, first.key, DATA), str(dest))
    others = [sf.item_for(dest, rel, DATA) for rel in ("copy/a.safetensors", "other/a.safetensors")]
    for other in others:
        _snapshot_staging.link_duplicate(first, other, staging, str(dest))
    assert all(_manifest.same_stat(it.stat, it.final) and "ctime_ns" in it.stat for it in [first] + others)


def test_a_duplicate_of_a_file_changed_since_it_was_verified_is_refused(tmp_path):
    dest = tmp_path / "d"
    staging = _snapshot_staging.make_staging(str(dest))
    first = sf.item_for(dest, "a.safetensors", DATA)
    _snapshot_staging.place(first, sf.write(staging, first.key, DATA), str(dest))
    rewrite_keeping_stat(first.final)
    other = sf.item_for(dest, "copy/a.safetensors", DATA)
    with pytest.raises(_snapshot.SnapshotError) as err:
        _snapshot_staging.link_duplicate(first, other, staging, str(dest))
    assert "changed after this run verified it" in err.value.msg and not os.path.exists(other.final)


def spy_rewriting(monkeypatch, victim):
    """verify_local that rewrites ``victim`` (stat kept but ctime) right after reading its bytes."""
    real = _snapshot_plan.verify_local

    def verify_then_rewrite(path, remote):
        res = real(path, remote)
        if path == victim:
            rewrite_keeping_stat(path)
        return res

    monkeypatch.setattr(_snapshot_plan, "verify_local", verify_then_rewrite)


def test_plan_does_not_record_a_file_rewritten_while_it_was_hashed(tmp_path, monkeypatch):
    item = sf.item_for(tmp_path, "a.safetensors", DATA)
    sf.write(tmp_path, "a.safetensors", DATA)
    spy_rewriting(monkeypatch, item.final)
    _snapshot_plan.plan([item], None)
    # The hash saw the right bytes, the file holds others now: a record taken after the hash would
    # vouch for them on every later run.
    assert item.action == "fetch" and item.stat is None


def test_a_link_source_rewritten_while_it_was_hashed_is_not_linked(tmp_path, monkeypatch):
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    source = sf.write(v1, "a.safetensors", DATA)
    staging = _snapshot_staging.make_staging(str(v2))
    item = sf.item_for(v2, "a.safetensors", DATA)
    item.source = (source, dict(sf.record(source, item.remote), stat=None))  # no record: its bytes decide
    spy_rewriting(monkeypatch, source)
    assert not _snapshot_staging.link_from_source(item, staging, str(v2)) and not os.path.exists(item.final)


# --- shared storage: the lock (item 8) ------------------------------------------------------------

def test_lock_timeout_says_another_host_may_hold_it(tmp_path):
    dest = str(tmp_path / "d")
    with _manifest.DirLock(dest):
        with pytest.raises(_manifest.LockTimeout) as err:
            with _manifest.DirLock(dest, timeout=0):
                pass
    msg = str(err.value)
    assert "another host sharing this storage" in msg and os.path.join(dest, ".gpufleet", "lock") in msg
    assert "raise lock_timeout" in msg


# --- end to end: hf_snapshot, then a rewrite that keeps the stat (items 9 and 10) -----------------

def test_hf_snapshot_rehashes_and_refetches_a_rewrite_that_kept_the_stat(lab_hub, aria2c, tmp_path):
    dest = tmp_path / "d"
    fetch(lab_hub, dest, allow_patterns=["*00002*", "config.json"])
    dummy, files = lab_hub.files_at(TARGET, "main")
    rewrite_keeping_stat(str(dest / SHARD2))
    lab_hub.reset()
    res = fetch(lab_hub, dest, allow_patterns=["*00002*", "config.json"])
    actions = {f["path"]: f["action"] for f in res["files"]}
    assert actions == {SHARD2: "fetched", "config.json": "present"} and res["changed"]
    assert sha256(dest / SHARD2) == files[SHARD2]["lfs"]["sha256"]
    rec = _manifest.read_manifest(str(dest))["files"][SHARD2]["stat"]
    assert "ctime_ns" in rec and _manifest.same_stat(rec, str(dest / SHARD2))


def test_auto_after_hf_snapshot_fails_a_rewrite_that_kept_the_stat(lab_hub, aria2c, tmp_path):
    dest = tmp_path / "d"
    fetch(lab_hub, dest)
    dummy, files = lab_hub.files_at(TARGET, "main")
    want = files[SHARD2]["lfs"]["sha256"]
    rewrite_keeping_stat(str(dest / SHARD2))
    for dummy in range(2):  # and the damage is not remembered as verified: the second run fails too
        res = _verify.verify(str(dest), mode="auto")
        assert not res["ok"] and SHARD2 in res["hashed"]
        assert any(SHARD2 in p and "sha256" in p for p in res["problems"]), res["problems"]
        with open(dest / ".gpufleet" / "statcache.json") as handle:
            cached = json.load(handle)["files"].get(SHARD2)
        assert cached is None or cached["sha256"] != want
    # The untouched shards were vouched for by hf_snapshot's records (taken with ctime): not hashed.
    assert not any(rel.endswith(".safetensors") and rel != SHARD2 for rel in res["hashed"])
