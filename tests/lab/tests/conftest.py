"""Shared pytest setup for the lab tests.

Registers the `lab` marker and provides the `hub` fixture: the lab Hub server, started once per
session on loopback (API 127.0.0.1, CDN 127.0.0.2, free ports) over the real fixture store, with
its control state reset before every test that uses it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

LAB_DIR = Path(__file__).resolve().parents[1]
HUB_SERVER = LAB_DIR / "hub" / "server.py"
CACHE = Path(os.environ.get("GPUFLEET_LAB_CACHE", os.path.expanduser("~/.cache/gpufleet-lab")))

if str(LAB_DIR) not in sys.path:
    sys.path.insert(0, str(LAB_DIR))

import ready  # noqa: E402  (tests/lab/ready.py)

# huggingface_hub reads these at import time: no stored or ambient token may leak into the
# tests (an unknown token is a 401 on the lab Hub, as on the real one), no telemetry, no Xet.
_HF_HOME = tempfile.mkdtemp(prefix="gflab-hf-home-")
os.environ["HF_HOME"] = _HF_HOME
for _var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE"):
    os.environ.pop(_var, None)
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_XET"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"

HUB_STOP_TIMEOUT = 10.0


def pytest_configure(config):
    config.addinivalue_line("markers", "lab: needs the booted lab: make lab-up")


def pytest_unconfigure(config):
    shutil.rmtree(_HF_HOME, ignore_errors=True)


class HubClient:
    """A running lab Hub: its URLs and its /_lab/ control API."""

    def __init__(self, api: str, cdn: str, store: Path, log_file: Path, proc: subprocess.Popen):
        self.api, self.cdn, self.store, self.log_file, self.proc = api, cdn, store, log_file, proc

    def _call(self, method: str, path: str, body=None, timeout: float = 10.0):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.api + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path} -> {e.code}: {e.read()[:500]!r}") from None

    def reset(self):
        return self._call("POST", "/_lab/reset", {})

    def faults(self, *rules, append: bool = False):
        return self._call("POST", "/_lab/faults" + ("?append=true" if append else ""), {"rules": list(rules)})

    def fault_state(self):
        return self._call("GET", "/_lab/faults")["rules"]

    def config(self, **changes):
        return self._call("POST", "/_lab/config", changes) if changes else self._call("GET", "/_lab/config")

    def log(self, since: int = 0, server: str | None = None) -> list:
        q = f"?since={since}" + (f"&server={server}" if server else "")
        return self._call("GET", "/_lab/log" + q)

    def last_seq(self) -> int:
        entries = self.log()
        return entries[-1]["seq"] if entries else 0

    def repo(self, repo_id: str) -> dict:
        return json.loads((self.store / "store" / repo_id / "repo.json").read_text())

    def blob(self, sha256: str) -> Path:
        return self.store / "blobs" / sha256


def start_hub_process(store: Path, log_file: Path, tokens: Path | None = None, extra=()):
    """Run server.py exactly as labctl does, on free loopback ports; returns (proc, ready JSON)."""
    cmd = [sys.executable, str(HUB_SERVER), "--store", str(store), "--api", "127.0.0.1:0",
           "--cdn", "127.0.0.2:0", "--log", str(log_file), *extra]
    if tokens is not None:
        cmd += ["--tokens", str(tokens)]
    # One ready file per start: a test may run a second Hub beside the session's.
    ready_file = Path(tempfile.mkdtemp(prefix="gflab-hub-", dir=log_file.parent)) / "ready.json"
    return ready.start(cmd, ready_file=ready_file, what="the lab Hub")


def stop_hub_process(proc: subprocess.Popen) -> int:
    return ready.stop(proc, timeout=HUB_STOP_TIMEOUT)


@pytest.fixture(scope="session")
def fixture_store() -> Path:
    from fixtures import ensure_fixtures  # tests/lab/fixtures.py

    return Path(ensure_fixtures(CACHE))


@pytest.fixture(scope="session")
def hub_server(fixture_store, tmp_path_factory):
    log_file = tmp_path_factory.mktemp("hub") / "requests.jsonl"
    proc, ready = start_hub_process(fixture_store, log_file, tokens=fixture_store / "tokens.json")
    client = HubClient(ready["api"], ready["cdn"], fixture_store, log_file, proc)
    yield client
    rc = stop_hub_process(proc)
    assert rc == 0, f"lab Hub exited with {rc} on SIGTERM"


@pytest.fixture
def hub(hub_server) -> HubClient:
    """The session's lab Hub with faults, caps, config and log cleared."""
    assert hub_server.proc.poll() is None, "lab Hub died"
    hub_server.reset()
    yield hub_server
    hub_server.reset()


@pytest.fixture(scope="session")
def lab_tokens() -> dict:
    import fixtures

    return {"reader": fixtures.TOKEN_READER, "no_gated": fixtures.TOKEN_NO_GATED}
