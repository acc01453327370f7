# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab Hub (tests/lab/hub/server.py) on loopback for the hf_snapshot unit tests.

The units environment cannot import tests/lab, so the server and the fixture generator run as
subprocesses, found by path from the collection root. The fixture store is generated into a
session temp dir (a few seconds) so these tests never touch the shared lab cache. In an installed
collection tests/lab is absent: those tests are skipped, saying so.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request

import pytest

from ansible_collections.gpufleet.llm.tests.unit.plugins import lab_ready
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import model_trees

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
LAB = os.path.join(ROOT, "tests", "lab")
SERVER = os.path.join(LAB, "hub", "server.py")
FIXTURES = os.path.join(LAB, "fixtures.py")
TOKEN_READER = "hf_labREADERfakeTOKENnotAsecret000001"  # tests/lab/fixtures.py, lab-only, fake
TOKEN_NO_GATED = "hf_labNOGATEDfakeTOKENnotAsecret00002"
TARGET = "gpufleet-lab/Kimi-K2.6-mini"
DRAFTER = "gpufleet-lab/Kimi-K2.6-mini-DFlash"
GATED = "gpufleet-lab/Kimi-K2.6-mini-gated"


class LabHub(object):
    def __init__(self, api, cdn, store, proc):
        self.api, self.cdn, self.store, self.proc = api, cdn, store, proc

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.api + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"null")

    def reset(self):
        return self.call("POST", "/_lab/reset", {})

    def faults(self, *rules):
        return self.call("POST", "/_lab/faults", {"rules": list(rules)})

    def fault_state(self):
        return self.call("GET", "/_lab/faults")["rules"]

    def config(self, **changes):
        return self.call("POST", "/_lab/config", changes)

    def log(self, server=None):
        return self.call("GET", "/_lab/log" + ("?server=%s" % server if server else ""))

    def repo(self, repo_id):
        with open(os.path.join(self.store, "store", repo_id, "repo.json")) as handle:
            return json.load(handle)

    def files_at(self, repo_id, ref):
        repo = self.repo(repo_id)
        refs = dict(repo["refs"]["branches"], **repo["refs"]["tags"])
        sha = refs.get(ref, ref)
        return sha, {f["path"]: f for f in repo["commits"][sha]["files"]}

    def blob_path(self, entry):
        return os.path.join(self.store, "blobs", entry["lfs"]["sha256"])


_RUN_ENV = "GPUFLEET_UNITS_LAB_RUN"


def _run_cache():
    return os.path.join(tempfile.gettempdir(), "gpufleet-units-lab-%s" % os.environ[_RUN_ENV])


def pytest_configure(config):  # pylint: disable=unused-argument
    # Runs in the pytest process itself (each xdist worker), before any test is forked from it.
    os.environ[_RUN_ENV] = str(os.getpid())


def pytest_sessionfinish(session, exitstatus):  # pylint: disable=unused-argument
    if os.environ.get(_RUN_ENV) == str(os.getpid()):
        shutil.rmtree(_run_cache(), ignore_errors=True)


def _parent_death_signal(signum):
    """A Popen preexec_fn: the child gets ``signum`` when the process that started it exits."""
    def preexec():
        import ctypes  # pylint: disable=import-outside-toplevel

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signum, 0, 0, 0)
    return preexec


@pytest.fixture(scope="session")
def die_with_parent():
    """Servers a test starts must end with the (forked) test process, teardown or not."""
    return _parent_death_signal


@pytest.fixture(scope="session")
def lab_store():
    if not os.path.exists(SERVER) or not os.path.exists(FIXTURES):
        pytest.skip("tests/lab is not part of this tree (installed collection): no lab Hub to test against")
    try:
        import numpy  # noqa: F401  pylint: disable=unused-import
        import safetensors  # noqa: F401  pylint: disable=unused-import
    except ImportError as exc:
        pytest.skip("the fixture generator needs numpy and safetensors: %s" % exc)
    # ansible-test runs each test in a fork of the pytest process, so a session fixture is set up
    # again in every fork and its teardown never runs: one store per pytest process (generated once,
    # fixtures.py skips a complete one), removed by pytest_sessionfinish in that process.
    cache = _run_cache()
    res = subprocess.run([sys.executable, FIXTURES, "--cache", cache], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        pytest.fail("fixtures.py failed: %s" % (res.stderr[-2000:] or res.stdout[-2000:]))
    yield os.path.join(cache, "fixtures")


@pytest.fixture(scope="session")
def lab_hub_server(lab_store):
    ready = lab_ready.load()
    store = lab_store
    cmd = [sys.executable, SERVER, "--store", store, "--api", "127.0.0.1:0", "--cdn", "127.0.0.2:0",
           "--tokens", os.path.join(store, "tokens.json")]
    # One ready file per (forked) test process: each starts its own Hub (see lab_store).
    ready_file = os.path.join(os.path.dirname(store), "hub-ready-%d.json" % os.getpid())
    try:
        # The server must end with the (forked) test process that started it, teardown or not.
        proc, info = ready.start(cmd, ready_file=ready_file, what="the lab Hub",
                                 preexec_fn=_parent_death_signal(signal.SIGTERM))
    except ready.NotReady as exc:
        pytest.fail("the lab Hub did not start: %s" % exc)
    yield LabHub(info["api"], info["cdn"], store, proc)
    ready.stop(proc)


@pytest.fixture
def lab_hub(lab_hub_server, monkeypatch, tmp_path):
    """The session's lab Hub, reset; no ambient token or endpoint leaks into the code under test."""
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    assert lab_hub_server.proc.poll() is None, "lab Hub died"
    lab_hub_server.reset()
    yield lab_hub_server
    lab_hub_server.reset()


@pytest.fixture
def aria2c():
    path = shutil.which("aria2c")
    if not path:
        pytest.skip("aria2c is not installed on this controller (apt-get install aria2)")
    return path


@pytest.fixture(scope="session")
def golden(tmp_path_factory):
    """A golden Kimi-shaped target + DFlash drafter (model_trees.py), made once."""
    base = tmp_path_factory.mktemp("golden")
    model_trees.make_golden(str(base))
    return str(base)


@pytest.fixture
def trees(golden, tmp_path):
    """(target, drafter): fresh copies with hf_snapshot-style manifests, for one test to break."""
    return model_trees.fresh_copy(golden, str(tmp_path / "models"))
