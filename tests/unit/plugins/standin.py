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
units forks each test, so fixture teardown is not guaranteed to run.

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
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

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
    def __init__(self, proc, url, port, config, log_path, options):
        self.proc, self.url, self.port = proc, url, port
        self.config, self.log_path, self.options = config, log_path, options

    def log(self):
        try:
            with open(self.log_path, "r", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def _get(self, path, timeout=5.0):
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:  # nosec B310 - loopback test URL
                return resp.status
        except urllib.error.HTTPError as exc:
            exc.close()
            return exc.code

    def wait_answering(self, timeout=60.0):
        """Until the server answers HTTP at all (503 while 'loading' counts); fails if it exits."""
        return self._wait(lambda status: status is not None, timeout, "answer HTTP")

    def wait_ready(self, timeout=60.0):
        """Until /health answers 200."""
        return self._wait(lambda status: status == 200, timeout, "answer /health with 200")

    def _wait(self, done, timeout, what):
        deadline = time.monotonic() + timeout
        status = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail("the SGLang stand-in exited (%s) before it would %s; its log:\n%s"
                            % (self.proc.returncode, what, self.log()[-3000:]))
            try:
                status = self._get("/health", timeout=2.0)
            except (urllib.error.URLError, OSError):
                status = None
            if done(status):
                return status
            time.sleep(0.05)
        pytest.fail("the SGLang stand-in did not %s within %ss (last /health: %s); its log:\n%s"
                    % (what, timeout, status, self.log()[-3000:]))
        return None  # not reached

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


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
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(  # pylint: disable=consider-using-with,subprocess-popen-preexec-fn
            [sys.executable, STANDIN, "--config", config], stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, cwd=base, env=child_env, preexec_fn=die_with_parent(signal.SIGTERM))
    server = Standin(proc, "http://127.0.0.1:%d" % port, port, config, log_path, cfg)
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
