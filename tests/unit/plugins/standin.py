# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Start the lab's SGLang STAND-IN (tests/lab/sglang_standin/gpufleet_lab_sglang.py) on loopback for
unit tests. It is not SGLang: no GPU here, so it models loading, generation and speculative
acceptance openly (see its docstring and docs/lab.md); its timings say nothing about GPUs.

It runs as a subprocess with this interpreter (``sys.executable``: the units venv has safetensors,
numpy and PyYAML), on a free loopback port, with its caches ($HOME, HF modules, triton, inductor)
in the test's temp dir, its log in a file there, and a parent-death signal (conftest's
``die_with_parent``) so that no server outlives the forked test that started it: ansible-test
units forks each test, so fixture teardown is not guaranteed to run. It is started and waited for
with tests/lab/ready.py (lab_ready.py): its ``--ready-file`` says "loading" once it listens and
"ready" once /health answers 200.

Usage (``die_with_parent`` and ``golden`` are fixtures of tests/unit/plugins/conftest.py)::

    server = standin.start(str(tmp_path), model_path, die_with_parent, drafter=drafter_path,
                           env={"GPUFLEET_STANDIN_ACCEPT_MEAN": "4"})
    server.wait_ready()
    ...
    server.stop()

When the stand-in is not in the tree (an installed collection) ``start`` skips the test, saying so.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys

import pytest

from ansible_collections.gpufleet.llm.tests.unit.plugins import lab_ready

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
STANDIN = os.path.join(ROOT, "tests", "lab", "sglang_standin", "gpufleet_lab_sglang.py")

# Fast and deterministic unless a test says otherwise: no loading pause, 2 ms per verify step.
BASE_ENV = {
    "GPUFLEET_STANDIN_LOAD_SECONDS": "0",
    "GPUFLEET_STANDIN_STEP_MS": "2",
    "GPUFLEET_STANDIN_SEED": "0",
}
_KNOBS = ("GPUFLEET_STANDIN_LOAD_SECONDS", "GPUFLEET_STANDIN_NEVER_READY", "GPUFLEET_STANDIN_STEP_MS",
          "GPUFLEET_STANDIN_SPEC_COST", "GPUFLEET_STANDIN_ACCEPT_MEAN", "GPUFLEET_STANDIN_SEED")


def free_port(host="127.0.0.1"):
    """A port nothing listens on right now (for a server to take, or for 'connection refused')."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _yaml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(str(value))  # a JSON string is a YAML string


def write_config(path, options):
    with open(path, "w") as handle:
        for key, value in options.items():
            handle.write("%s: %s\n" % (key, _yaml_value(value)))
    return path


class Standin(object):
    def __init__(self, proc, url, port, config, log_path, options, ready_file):
        self.proc, self.url, self.port = proc, url, port
        self.config, self.log_path, self.options = config, log_path, options
        self.ready_file = ready_file

    def log(self):
        try:
            with open(self.log_path, "r", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def wait_answering(self, timeout=60.0):
        """Until the server answers HTTP at all (its ready file says "loading" or "ready")."""
        return self._wait(None, timeout)

    def wait_ready(self, timeout=60.0):
        """Until /health answers 200 (its ready file says "ready" from that moment on)."""
        return self._wait(lambda info: info["state"] == "ready", timeout)

    def _wait(self, until, timeout):
        ready = lab_ready.load()
        try:
            return ready.wait(self.proc, self.ready_file, what="the SGLang stand-in", until=until, timeout=timeout,
                              log=self.log_path)
        except ready.NotReady as exc:
            pytest.fail(str(exc))
        return None  # not reached

    def stop(self):
        """SIGINT: the stand-in stops at once. SIGTERM would drain as SGLang 0.5.23 does, checking every
        5 s (docs/lab.md); the unit tests do not test the drain (tests/lab/tests/test_sglang_standin.py does)."""
        return lab_ready.load().stop(self.proc, sig=signal.SIGINT)


def start(workdir, model_path, die_with_parent, drafter=None, speculative=None, api_key=None, env=None,
          options=None, wait="answering"):
    """Start a stand-in on a free loopback port; returns a ``Standin``.

    ``drafter`` makes it speculative (``speculative`` defaults to DFLASH then, with
    trust-remote-code); ``options`` adds or overrides config keys (dash form); ``env`` sets the
    GPUFLEET_STANDIN_* knobs on top of BASE_ENV. ``wait``: "answering" (HTTP bound, maybe 503),
    "ready" (/health 200) or None.
    """
    if not os.path.isfile(STANDIN):
        pytest.skip("the SGLang stand-in %s is not part of this tree (installed collection)" % STANDIN)
    port = free_port()
    cfg = {"model-path": model_path, "host": "127.0.0.1", "port": port}
    if drafter:
        cfg.update({"speculative-algorithm": speculative or "DFLASH", "speculative-draft-model-path": drafter,
                    "trust-remote-code": True})
    elif speculative:
        cfg["speculative-algorithm"] = speculative
    if api_key:
        cfg["api-key"] = api_key
    cfg.update(options or {})
    tag = "standin-%d" % port
    base = os.path.join(workdir, tag)
    home = os.path.join(base, "home")
    os.makedirs(home)
    config = write_config(os.path.join(base, "server.yaml"), cfg)
    log_path = os.path.join(base, "server.log")
    child_env = {k: v for k, v in os.environ.items() if k not in _KNOBS}
    child_env.update(BASE_ENV)
    child_env.update(env or {})
    child_env.update({
        "HOME": home,
        "HF_MODULES_CACHE": os.path.join(home, "hf-modules"),
        "TRITON_CACHE_DIR": os.path.join(home, "triton"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(home, "inductor"),
        "PYTHONUNBUFFERED": "1",
    })
    ready_file = os.path.join(base, "ready.json")
    proc = lab_ready.load().spawn([sys.executable, STANDIN, "--config", config], ready_file=ready_file, log=log_path,
                                  cwd=base, env=child_env, preexec_fn=die_with_parent(signal.SIGTERM))
    server = Standin(proc, "http://127.0.0.1:%d" % port, port, config, log_path, cfg, ready_file)
    try:
        if wait == "answering":
            server.wait_answering()
        elif wait == "ready":
            server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture
def standin_factory(tmp_path, die_with_parent):
    """``start(model_path, **kw)`` -> Standin; every server started is stopped after the test."""
    servers = []

    def _start(model_path, **kwargs):
        server = start(str(tmp_path), model_path, die_with_parent, **kwargs)
        servers.append(server)
        return server

    yield _start
    for server in servers:
        server.stop()
