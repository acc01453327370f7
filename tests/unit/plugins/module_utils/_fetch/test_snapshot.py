# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_snapshot end to end: real aria2c against the real lab Hub on loopback (tests/unit/plugins/conftest.py).

The pieces without aria2c or the Hub are tested on their own in test_snapshot_*.py, test_strays.py
and test_transfer.py."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import time

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import settings as _snapshot_settings

TARGET = "gpufleet-lab/Kimi-K2.6-mini"
GATED = "gpufleet-lab/Kimi-K2.6-mini-gated"
TOKEN_READER = "hf_labREADERfakeTOKENnotAsecret000001"
SHARD3 = "model-00003-of-000004.safetensors"


def sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def run(hub, dest, check_mode=False, **params):
    base = dict(repo_id=TARGET, revision="main", dest=str(dest), endpoint=hub.api, min_free_bytes=0,
                retry_wait=1, connections=4, splits=4, min_split_size="1M")
    base.update(params)
    return _snapshot.snapshot(base, check_mode=check_mode)


def body_bytes(hub):
    """File-body bytes served: CDN GETs plus GETs of resolve URLs (non-LFS files)."""
    return sum(e["bytes_sent"] for e in hub.log() if e["method"] == "GET" and (e["server"] == "cdn" or "/resolve/" in e["path"]))


def git_blob(path):
    with open(path, "rb") as handle:
        data = handle.read()
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()  # nosec B324 - git object id


def assert_identical(hub, dest, repo, ref):
    """Every file byte-identical to the Hub's: LFS by sha256 (the store's blob), others by git blob id."""
    commit, files = hub.files_at(repo, ref)
    for path, entry in files.items():
        local = os.path.join(str(dest), path)
        if entry.get("lfs"):
            assert sha256(local) == entry["lfs"]["sha256"] == sha256(hub.blob_path(entry)), path
        else:
            assert git_blob(local) == entry["blob_id"], path
    return commit, files


def test_fetch_update_idempotent_offline(lab_hub, aria2c, tmp_path):
    v1 = tmp_path / "v1"
    res = run(lab_hub, v1, revision="v1.0")
    commit, files = assert_identical(lab_hub, v1, TARGET, "v1.0")
    assert res["changed"] and res["commit"] == commit
    assert {f["action"] for f in res["files"]} == {"fetched"}
    assert res["bytes_fetched"] == sum(f["size"] for f in files.values())
    manifest = _manifest.read_manifest(str(v1))
    assert manifest["commit"] == commit and set(manifest["files"]) == set(files)
    rec = manifest["files"][SHARD3]
    assert rec["sha256"] == files[SHARD3]["lfs"]["sha256"] and rec["lfs"] and rec["stat"]
    assert manifest["files"]["config.json"]["hub_id"] == files["config.json"]["blob_id"]
    assert manifest["files"]["config.json"]["sha256"] == sha256(v1 / "config.json")
    assert not (v1 / ".gpufleet" / "staging").exists()
    progress = json.loads((v1 / ".gpufleet" / "progress.json").read_text())
    assert progress["state"] == "done" and progress["bytes_done"] == progress["bytes_total"]

    # second run: changed=false, no file body bytes served
    lab_hub.reset()
    res = run(lab_hub, v1, revision="v1.0")
    assert not res["changed"] and {f["action"] for f in res["files"]} == {"present"}
    assert body_bytes(lab_hub) == 0 and res["bytes_fetched"] == 0

    # pinned commit + matching manifest: no network at all
    lab_hub.reset()
    res = run(lab_hub, v1, revision=commit)
    assert not res["changed"] and res["offline"] and lab_hub.log() == []

    # update to main with link_from: only the changed shard + config.json travel, the rest are links
    lab_hub.reset()
    main = tmp_path / "main"
    res = run(lab_hub, main, link_from=[str(v1)])
    main_commit, main_files = assert_identical(lab_hub, main, TARGET, "main")
    actions = {f["path"]: f["action"] for f in res["files"]}
    assert {p for p, a in actions.items() if a == "fetched"} == {SHARD3, "config.json"}
    assert all(a == "linked" for p, a in actions.items() if p not in (SHARD3, "config.json"))
    for path in main_files:
        same = os.stat(v1 / path).st_ino == os.stat(main / path).st_ino
        assert same == (path not in (SHARD3, "config.json")), path
    cdn = [e for e in lab_hub.log(server="cdn") if e["method"] == "GET"]
    assert {e["path"].split("/")[-1] for e in cdn} == {main_files[SHARD3]["lfs"]["sha256"]}
    # the earlier revision is untouched
    assert_identical(lab_hub, v1, TARGET, "v1.0")


def test_check_mode_writes_nothing(lab_hub, aria2c, tmp_path):
    dest = tmp_path / "d"
    res = run(lab_hub, dest, check_mode=True)
    assert res["changed"] and res["bytes_to_fetch"] == res["bytes_total"] > 0
    assert {f["action"] for f in res["files"]} == {"fetch"}
    assert not dest.exists()
    run(lab_hub, dest)
    res = run(lab_hub, dest, check_mode=True)
    assert not res["changed"] and res["bytes_to_fetch"] == 0


def test_patterns_and_branch_resolves_to_commit(lab_hub, aria2c, tmp_path):
    res = run(lab_hub, tmp_path / "d", allow_patterns=["*.json"], ignore_patterns=["model.safetensors.index.json"])
    commit, files = lab_hub.files_at(TARGET, "main")
    assert res["commit"] == commit and res["revision"] == "main"
    expected = sorted(p for p in files if p.endswith(".json") and p != "model.safetensors.index.json")
    assert sorted(f["path"] for f in res["files"]) == expected
    assert sorted(os.listdir(tmp_path / "d")) == sorted([".gpufleet"] + expected)


def test_gated_without_and_with_token_never_reaching_cdn(lab_hub, aria2c, tmp_path):
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, tmp_path / "g", repo_id=GATED)
    assert "gated or private" in err.value.msg and "token" in err.value.msg
    lab_hub.reset()
    seen = []
    stop = threading.Event()

    def sample_ps():
        while not stop.is_set():
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        with open("/proc/%s/cmdline" % pid, "rb") as handle:
                            seen.append(handle.read())
                    except OSError:
                        pass
            time.sleep(0.05)

    sampler = threading.Thread(target=sample_ps)
    sampler.start()
    try:
        res = run(lab_hub, tmp_path / "g", repo_id=GATED, token=TOKEN_READER)
    finally:
        stop.set()
        sampler.join()
    assert_identical(lab_hub, tmp_path / "g", GATED, "main")
    assert any(b"aria2c" in cmd for cmd in seen), "no aria2c seen in ps samples"
    assert not any(TOKEN_READER.encode() in cmd for cmd in seen)
    assert TOKEN_READER not in json.dumps(res)
    log = lab_hub.log()
    assert any(e["server"] == "cdn" for e in log)
    assert not any(e["auth_present"] for e in log if e["server"] == "cdn")
    assert any(e["auth_present"] for e in log if e["server"] == "api")
    for root, dummy, names in os.walk(tmp_path / "g"):
        for name in names:
            with open(os.path.join(root, name), "rb") as handle:
                assert TOKEN_READER.encode() not in handle.read(), name


def test_public_repo_sends_no_token(lab_hub, aria2c, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN_READER)  # the host has a token: a public repo must not get it
    run(lab_hub, tmp_path / "d", allow_patterns=["config.json", "*00001*"])
    assert not any(e["auth_present"] for e in lab_hub.log())


def test_traversal_refused(lab_hub, aria2c, tmp_path, monkeypatch):
    real = _hub.list_revision

    def evil(api, repo_id, commit, repo_type="model"):
        return real(api, repo_id, commit, repo_type) + [_hub.RemoteFile("../../etc/evil", 3, "e" * 40, None, False)]

    monkeypatch.setattr(_hub, "list_revision", evil)
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, tmp_path / "d")
    assert "outside" in err.value.msg and "../../etc/evil" in err.value.msg
    assert not (tmp_path / "d").exists()
    # a symlink inside dest pointing out is refused too
    (tmp_path / "d").mkdir()
    (tmp_path / "out").mkdir()
    os.symlink(str(tmp_path / "out"), str(tmp_path / "d" / "sub"))
    monkeypatch.setattr(_hub, "list_revision", lambda *a, **k: [_hub.RemoteFile("sub/x.json", 3, "e" * 40, None, False)])
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, tmp_path / "d")
    assert "symlink" in err.value.msg
    assert os.listdir(tmp_path / "out") == []


def test_disk_preflight_names_needed_and_free(lab_hub, aria2c, tmp_path):
    # The filesystem's whole size, not its free bytes at this instant: other processes free space
    # between a measurement and the module's own (a test run failed so), and free never exceeds size.
    st = os.statvfs(str(tmp_path))
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, tmp_path / "d", min_free_bytes=st.f_blocks * st.f_frsize)
    msg = err.value.msg
    assert "not enough disk space" in msg and "free" in msg and "min_free_bytes" in msg
    assert err.value.details["disk"]["needed_bytes"] > 0
    assert lab_hub.log(server="cdn") == []


def test_a_dest_the_filesystem_refuses_is_one_message_not_a_traceback(lab_hub, aria2c, tmp_path):
    """dest below a regular file: makedirs raised NotADirectoryError out of the module (a traceback)."""
    (tmp_path / "f").write_bytes(b"a file, not a folder")
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, tmp_path / "f" / "d", allow_patterns=["config.json"], token="hf_s3cret")
    msg = err.value.msg
    assert msg.startswith("the filesystem refused an operation under %s: Not a directory (ENOTDIR) at %s"
                          % (tmp_path / "f" / "d", tmp_path / "f")), msg
    assert "run again" in msg and "hf_s3cret" not in msg
    assert isinstance(err.value.__cause__, OSError)
    kwargs = err.value.fail_kwargs()
    assert "NotADirectoryError" in kwargs["exception"] and "hf_s3cret" not in repr(kwargs)
    assert (tmp_path / "f").read_bytes() == b"a file, not a folder"


def test_strays_reported_and_pruned(lab_hub, aria2c, tmp_path):
    dest = tmp_path / "d"
    run(lab_hub, dest, allow_patterns=["*.json"])
    (dest / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (dest / ".cache" / "huggingface" / "download" / "x.incomplete").write_bytes(b"\0" * 4096)
    (dest / "model-00009.safetensors.aria2").write_bytes(b"ctl")
    (dest / "notes.txt").write_text("mine")
    res = run(lab_hub, dest, allow_patterns=["*.json"])
    kinds = {s["path"]: s["kind"] for s in res["stray"]}
    assert kinds == {".cache/huggingface/download/x.incomplete": "partial",
                     "model-00009.safetensors.aria2": "partial", "notes.txt": "extra"}
    assert res["pruned"] == [] and not res["changed"]
    res = run(lab_hub, dest, allow_patterns=["*.json"], prune_partials=True)
    assert res["changed"]
    assert sorted(res["pruned"]) == [".cache/huggingface/download/x.incomplete", "model-00009.safetensors.aria2"]
    assert (dest / "notes.txt").read_text() == "mine"  # never removes what is not a partial
    assert [s["path"] for s in res["stray"]] == ["notes.txt"]


def test_same_size_corruption_refetched_and_hardlink_safe(lab_hub, aria2c, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run(lab_hub, a, allow_patterns=["*00002*"])
    run(lab_hub, b, allow_patterns=["*00002*"], link_from=[str(a)])
    name = "model-00002-of-000004.safetensors"
    assert os.stat(a / name).st_ino == os.stat(b / name).st_ino
    # break the link in b by replacing its content with same-size garbage (as a bad copy would)
    size = os.path.getsize(b / name)
    os.unlink(b / name)
    (b / name).write_bytes(b"\0" * size)
    lab_hub.reset()
    res = run(lab_hub, b, allow_patterns=["*00002*"])
    assert [f["action"] for f in res["files"]] == ["fetched"]
    dummy, files = lab_hub.files_at(TARGET, "main")
    assert sha256(b / name) == files[name]["lfs"]["sha256"] == sha256(a / name)


def test_preallocated_staging_file_without_control_is_not_trusted(lab_hub, aria2c, tmp_path):
    dest = tmp_path / "d"
    dummy, files = lab_hub.files_at(TARGET, "main")
    entry = files[SHARD3]
    staging = dest / ".gpufleet" / "staging"
    staging.mkdir(parents=True)
    # full length, no .aria2: aria2 -c alone would call it complete
    (staging / entry["lfs"]["sha256"]).write_bytes(b"\0" * entry["size"])
    res = run(lab_hub, dest, allow_patterns=[SHARD3])
    assert sha256(dest / SHARD3) == entry["lfs"]["sha256"]
    assert [f["action"] for f in res["files"]] == ["fetched"]


def test_bytes_not_matching_the_listing_never_reach_their_path(lab_hub, aria2c, tmp_path, monkeypatch):
    """The module's own sha256 (aria2 gets no checksum=) keeps wrong bytes out of the final path."""
    real_list, real_resolve = _hub.list_revision, _hub.resolve_file

    def wrong_sha(*args, **kwargs):
        return [f._replace(sha256="0" * 64) if f.path == SHARD3 else f for f in real_list(*args, **kwargs)]

    def no_linked_etag(*args, **kwargs):
        return real_resolve(*args, **kwargs)._replace(sha256=None)  # else the resolve check trips first

    monkeypatch.setattr(_hub, "list_revision", wrong_sha)
    monkeypatch.setattr(_hub, "resolve_file", no_linked_etag)
    dest = tmp_path / "d"
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest, allow_patterns=[SHARD3, "config.json"], max_tries=2)
    assert SHARD3 in err.value.msg and "do not match" in err.value.msg
    assert not os.path.lexists(dest / SHARD3)
    assert os.path.isfile(dest / "config.json")  # the good file of the same batch is placed


def test_faults_and_url_expiry(lab_hub, aria2c, tmp_path):
    lab_hub.faults(
        {"server": "cdn", "method": "GET", "status": 500, "times": 2},
        {"server": "cdn", "method": "GET", "status": 429, "retry_after": 1, "times": 2},
        {"server": "cdn", "method": "GET", "action": "reset", "after_bytes": 100000, "times": 2},
        {"server": "cdn", "method": "GET", "action": "truncate", "after_bytes": 200000, "times": 2},
        {"server": "api", "method": "HEAD", "path": "config.json", "status": 503, "retry_after": 1, "times": 1},
        {"server": "api", "path": "/revision/", "status": 500, "times": 1},
    )
    res = run(lab_hub, tmp_path / "d", max_tries=8)
    assert_identical(lab_hub, tmp_path / "d", TARGET, "main")
    assert all(r["fired"] == r.get("times") for r in lab_hub.fault_state())
    assert res["changed"]
    # signed URLs that expire mid-fetch: re-resolved, resumed
    lab_hub.reset()
    # The lab signs exp = int(now) + ttl and refuses once now > exp, so a 1 s URL lives at most 1 s.
    # A reset after 2 MB at 1 MiB/s comes >= 1.9 s after the URL was signed: every reconnect meets a
    # stale URL. (1 MB, ~0.95 s, left a reconnect inside the validity window now and then: CI flake.)
    lab_hub.config(cdn_url_ttl=1, rate_per_conn=1024 * 1024)
    lab_hub.faults({"server": "cdn", "method": "GET", "action": "reset", "after_bytes": 2000000, "times": 2})
    res = run(lab_hub, tmp_path / "e", allow_patterns=["*00001*", "*00002*"], max_tries=10, connections=1, splits=1)
    dummy, files = lab_hub.files_at(TARGET, "main")
    for f in res["files"]:
        assert sha256(tmp_path / "e" / f["path"]) == files[f["path"]]["lfs"]["sha256"]
    assert all(r["fired"] == r.get("times") for r in lab_hub.fault_state()), "a shard ended before its reset"
    assert any(e["status"] == 403 for e in lab_hub.log(server="cdn")), "no URL expired: test proves nothing"


def _aria2_children():
    me = str(os.getpid())
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open("/proc/%s/comm" % pid) as handle:
                comm = handle.read().strip()
        except OSError:
            continue
        if fields[1] == me and comm == "aria2c":
            pids.append(int(pid))
    return pids


# test_sigkill_of_aria2_mid_file_resumes: the kill waits for this much progress; the deadline only fails.
KILL_AFTER_BYTES = 512 * 1024
KILL_DEADLINE = 120


def _progress_bytes(dest):
    """bytes_done in dest's progress.json (0 before its first write or while it is being replaced)."""
    try:
        with open(os.path.join(str(dest), ".gpufleet", "progress.json")) as handle:
            return json.load(handle).get("bytes_done") or 0
    except (OSError, ValueError):
        return 0


def _partial_with_control(dest, least):
    """Staging files holding at least ``least`` bytes on disk, with aria2's .aria2 control file beside."""
    staging = os.path.join(str(dest), ".gpufleet", "staging")
    try:
        names = set(os.listdir(staging))
    except OSError:
        return []
    found = []
    for name in sorted(names):
        if name + ".aria2" not in names:
            continue
        try:
            st = os.stat(os.path.join(staging, name))
        except OSError:
            continue
        if min(st.st_size, st.st_blocks * 512) >= least:
            found.append(name)
    return found


def test_sigkill_of_aria2_mid_file_resumes(lab_hub, aria2c, tmp_path):
    lab_hub.config(rate_per_conn=1024 * 1024)
    dest = tmp_path / "d"
    box = {}

    def target():
        try:
            # One file on one connection at a time: what a SIGKILL can lose is what was in flight
            # since aria2's last save (--auto-save-interval) plus socket buffers, ~1 s of 1 MiB/s;
            # with six files at once that alone is ~17% of this small repo and says nothing.
            box["res"] = run(lab_hub, dest, allow_patterns=["*.safetensors"], max_tries=1, connections=1, splits=1,
                             parallel_files=1)
        except _snapshot.SnapshotError as exc:
            box["err"] = exc

    worker = threading.Thread(target=target)
    worker.start()
    # Driven by bytes, not by the clock: kill once the fetch shows progress (progress.json counts
    # bytes) and a file is half-way in staging with its .aria2 control file beside it, i.e. aria2 is
    # mid-file with state to resume from. The deadline only fails the test, it never triggers the kill.
    deadline = time.monotonic() + KILL_DEADLINE
    killed = False
    while not killed:
        assert time.monotonic() < deadline, "no partial file with bytes in staging within %d s: %s" % (
            KILL_DEADLINE, _progress_bytes(dest))
        assert worker.is_alive() or _aria2_children(), "the fetch ended before the kill: %r" % box
        if _progress_bytes(dest) >= KILL_AFTER_BYTES and _partial_with_control(dest, KILL_AFTER_BYTES):
            for pid in _aria2_children():
                os.kill(pid, signal.SIGKILL)
                killed = True
        if not killed:
            time.sleep(0.05)
    worker.join(120)
    assert killed
    assert "err" in box, "one try only: the killed run must fail"
    lab_hub.config(rate_per_conn=0)
    # The re-run with the module's own split defaults (16 connections, 8M minimum split). run()'s
    # 1M minimum splits these 6 MB fixture shards, and on loopback (32 MiB receive buffers, no rate
    # cap) the server then pushes whole files down connections aria2 closes after their first
    # megabyte: up to +25% "served" that no client read, which measures the test, not the resume.
    res = run(lab_hub, dest, allow_patterns=["*.safetensors"], connections=16, splits=16,
              min_split_size=_snapshot_settings.argument_spec()["min_split_size"]["default"])
    dummy, files = lab_hub.files_at(TARGET, "main")
    total = 0
    for f in res["files"]:
        assert sha256(dest / f["path"]) == files[f["path"]]["lfs"]["sha256"]
        total += f["size"]
    assert any(f["action"] == "resumed" for f in res["files"])
    served = sum(e["bytes_sent"] for e in lab_hub.log(server="cdn"))
    assert served <= 1.1 * total, (served, total)


def test_concurrent_runs_one_dest(lab_hub, aria2c, tmp_path):
    lab_hub.config(rate_per_conn=4 * 1024 * 1024)
    dest = tmp_path / "d"
    results = []

    def one():
        try:
            results.append(run(lab_hub, dest, allow_patterns=["*.safetensors"]))
        except _snapshot.SnapshotError as exc:
            results.append(exc)

    threads = [threading.Thread(target=one) for dummy in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 2 and all(isinstance(r, dict) for r in results), results
    assert sorted(r["changed"] for r in results) == [False, True]
    dummy, files = lab_hub.files_at(TARGET, "main")
    for path in (p for p in files if p.endswith(".safetensors")):
        assert sha256(dest / path) == files[path]["lfs"]["sha256"]


def test_lock_timeout_fails_clearly(lab_hub, aria2c, tmp_path):
    dest = tmp_path / "d"
    dest.mkdir()
    with _manifest.DirLock(str(dest)):
        with pytest.raises(_snapshot.SnapshotError) as err:
            run(lab_hub, dest, lock_timeout=0, allow_patterns=["config.json"])
    assert "locked by another run" in err.value.msg and "another host sharing this storage" in err.value.msg
    assert str(dest / ".gpufleet" / "lock") in err.value.msg and "lock_timeout" in err.value.msg
