# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hf_snapshot against olah 0.5.4, a third-party Hub mirror (tests/lab/olah/run_olah.py), on loopback.

olah is not the Hub and not our lab Hub: it ignores Range (200 with the whole file), answers GET
chunked without Content-Length, gives model_info siblings without file metadata, and serves the
fixture's safetensors as plain git blobs (no LFS sha256, no CDN redirect; tests/lab/tests/test_olah.py
asserts each deviation). hf_snapshot must still land byte-identical trees.

olah runs from its own venv (run_olah.ensure_olah_venv): the lab's ``$GPUFLEET_LAB_CACHE/olah-venv``
is reused when it exists, else one is created from PyPI (requirements/olah.txt). The fixture store
is the session's own (conftest.lab_store), so the shared lab cache is never written.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import sys

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.llm.plugins.modules import hf_snapshot
from ansible_collections.gpufleet.llm.tests.unit.plugins import lab_ready

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
RUN_OLAH = os.path.join(ROOT, "tests", "lab", "olah", "run_olah.py")
TARGET = "gpufleet-lab/Kimi-K2.6-mini"
DRAFTER = "gpufleet-lab/Kimi-K2.6-mini-DFlash"
SHARD3 = "model-00003-of-000004.safetensors"


def _lab_olah_venv():
    cache = os.environ.get("GPUFLEET_LAB_CACHE", os.path.expanduser("~/.cache/gpufleet-lab"))
    venv = os.path.join(cache, "olah-venv")
    return venv if os.path.exists(os.path.join(venv, "bin", "python")) else None


@pytest.fixture(scope="module")
def olah(lab_store, die_with_parent):
    """run_olah.py's CLI on a free loopback port over the session's fixture store; yields its URL."""
    if not os.path.exists(RUN_OLAH):
        pytest.skip("tests/lab/olah is not part of this tree (installed collection)")
    cache = os.path.dirname(lab_store)
    venv = _lab_olah_venv()
    if venv and not os.path.exists(os.path.join(cache, "olah-venv")):
        os.symlink(venv, os.path.join(cache, "olah-venv"))
    env = dict(os.environ, GPUFLEET_LAB_CACHE=cache)
    ready = lab_ready.load()
    ready_file = os.path.join(cache, "olah-ready-%d.json" % os.getpid())
    log = ready.default_log(ready_file)
    # --seconds bounds its life should this process die without stopping it.
    # SIGINT when this (forked) test process ends: run_olah stops olah in its `finally`.
    # 600 s: a first run installs olah's venv from PyPI.
    proc, info = ready.start([sys.executable, RUN_OLAH, "--cache", cache, "--seconds", "1800"],
                             ready_file=ready_file, what="run_olah.py", timeout=600, log=log, env=env,
                             preexec_fn=die_with_parent(signal.SIGINT))
    yield info["url"]
    # SIGINT: run_olah stops olah (its own session) and its upstream sentinel in `finally`.
    # Exit 1 means olah tried to reach its (fake) upstream: it must never do that.
    assert ready.stop(proc, sig=signal.SIGINT, timeout=30) == 0, ready.log_tail(log)


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")


def call(args, capsys, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            hf_snapshot.main()
    return json.loads(capsys.readouterr().out)


def store_files(store, repo_id, ref):
    with open(os.path.join(store, "store", repo_id, "repo.json")) as handle:
        repo = json.load(handle)
    refs = dict(repo["refs"]["branches"], **repo["refs"]["tags"])
    sha = refs.get(ref, ref)
    return sha, {f["path"]: f for f in repo["commits"][sha]["files"]}


def tree(dest):
    out = {}
    for root, dirs, names in os.walk(dest):
        dirs[:] = [d for d in dirs if d != ".gpufleet"]
        for name in names:
            path = os.path.join(root, name)
            out[os.path.relpath(path, dest)] = path
    return out


def assert_byte_identical(store, dest, expected):
    got = tree(dest)
    assert sorted(got) == sorted(expected)
    for name, entry in expected.items():
        with open(got[name], "rb") as handle:
            data = handle.read()
        assert len(data) == entry["size"], name
        if entry["lfs"]:
            assert hashlib.sha256(data).hexdigest() == entry["lfs"]["sha256"], name
            # and the very bytes the Hub serves
            with open(os.path.join(store, "blobs", entry["lfs"]["sha256"]), "rb") as handle:
                assert handle.read() == data, name
        else:
            assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == entry["blob_id"], name


@pytest.mark.parametrize("repo_id,ref", [(TARGET, "v1.0"), (TARGET, "main"), (DRAFTER, "main")])
def test_fetch_from_olah_byte_identical(olah, lab_store, aria2c, clean_env, tmp_path, capsys, repo_id, ref):
    sha, expected = store_files(lab_store, repo_id, ref)
    dest = str(tmp_path / "d")
    args = dict(repo_id=repo_id, revision=ref, dest=dest, endpoint=olah, min_free_bytes=0, retry_wait=1,
                max_tries=2, timeout=30)
    res = call(args, capsys, check_mode=True)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] and res["commit"] == sha and not os.path.exists(dest)
    assert res["bytes_to_fetch"] == sum(e["size"] for e in expected.values())

    res = call(args, capsys)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] and res["commit"] == sha
    assert sorted(f["path"] for f in res["files"] if f["action"] == "fetched") == sorted(expected)
    assert res["bytes_fetched"] == sum(e["size"] for e in expected.values())
    assert_byte_identical(lab_store, dest, expected)
    with open(os.path.join(dest, ".gpufleet", "manifest.json")) as handle:
        manifest = json.load(handle)
    assert manifest["commit"] == sha and sorted(manifest["files"]) == sorted(expected)
    for name, entry in expected.items():
        # olah lists no LFS sha256: the manifest's sha256 must still be the content's
        assert manifest["files"][name]["size"] == entry["size"], name
        if entry["lfs"]:
            assert manifest["files"][name]["sha256"] == entry["lfs"]["sha256"], name

    res = call(args, capsys)
    assert not res.get("failed"), res.get("msg")
    assert not res["changed"] and res["bytes_fetched"] == 0
    assert {f["action"] for f in res["files"]} == {"present"}


def test_update_from_olah_links_unchanged_files(olah, lab_store, aria2c, clean_env, tmp_path, capsys):
    """v1.0 then main with link_from: only config.json and shard 3 travel, the rest are hard links."""
    v1 = str(tmp_path / "v1")
    main = str(tmp_path / "main")
    common = dict(repo_id=TARGET, endpoint=olah, min_free_bytes=0, retry_wait=1, max_tries=2, timeout=30)
    res = call(dict(common, revision="v1.0", dest=v1), capsys)
    assert not res.get("failed"), res.get("msg")
    res = call(dict(common, revision="main", dest=main, link_from=[v1]), capsys)
    assert not res.get("failed"), res.get("msg")
    fetched = sorted(f["path"] for f in res["files"] if f["action"] == "fetched")
    assert fetched == ["config.json", SHARD3]
    sha, expected = store_files(lab_store, TARGET, "main")
    assert res["commit"] == sha
    assert_byte_identical(lab_store, main, expected)
    shard1 = "model-00001-of-000004.safetensors"
    assert os.stat(os.path.join(main, shard1)).st_ino == os.stat(os.path.join(v1, shard1)).st_ino
