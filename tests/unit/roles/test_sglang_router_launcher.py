# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_router role's launcher (roles/sglang_router/files/gpufleet-sglang-router.py) with the REAL
sglang-router 0.3.2 (fixtures/router_env.py): the key from SGLANG_ROUTER_API_KEY guards the router, and it is in
no process's command line; --api-key on the command line is refused."""
from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.router_env import (  # noqa: F401 pylint: disable=unused-import
    ROUTER_KEY, router_python)
from ansible_collections.gpufleet.llm.tests.unit.plugins.standin import free_port

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
LAUNCHER = os.path.join(ROOT, "roles", "sglang_router", "files", "gpufleet-sglang-router.py")


def _status(url, key=None):
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", "Bearer %s" % key)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_key_comes_from_the_environment_and_never_from_argv(router_python, tmp_path):
    port, metrics = free_port(), free_port()
    argv = [router_python, LAUNCHER, "--host", "127.0.0.1", "--port", str(port), "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(metrics), "--policy", "round_robin"]
    env = dict(os.environ, SGLANG_ROUTER_API_KEY=ROUTER_KEY, HF_HUB_OFFLINE="1", HOME=str(tmp_path))
    with open(str(tmp_path / "router.log"), "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = "http://127.0.0.1:%d" % port
        deadline = time.monotonic() + 60
        while True:
            try:
                if _status(url + "/liveness") == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "router.log").read_text()
            time.sleep(0.1)
        assert _status(url + "/workers") == 401
        assert _status(url + "/workers", "sk-not-the-key") == 401
        assert _status(url + "/workers", ROUTER_KEY) == 200
        with open("/proc/%d/cmdline" % proc.pid, "rb") as handle:
            cmdline = handle.read()
        assert ROUTER_KEY.encode() not in cmdline
        assert ROUTER_KEY not in (tmp_path / "router.log").read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("flag", [["--api-key", ROUTER_KEY], ["--api-key=%s" % ROUTER_KEY]])
def test_api_key_on_the_command_line_is_refused(router_python, flag):
    res = subprocess.run([router_python, LAUNCHER, "--port", "1"] + flag, capture_output=True, text=True, timeout=60,
                         check=False)
    assert res.returncode != 0
    assert "--api-key on the command line is refused" in res.stderr and "SGLANG_ROUTER_API_KEY" in res.stderr
