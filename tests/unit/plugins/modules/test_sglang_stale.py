# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_stale end to end, in-process, against a scripted systemctl and real files whose mtimes are
set (never taken from the clock): the lost-handler case is stale with its .previous as rollback
source, an older systemd falls back to the monotonic stamp, a broken systemctl is a clear failure."""
from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpufleet.llm.plugins.modules import sglang_stale
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils._sglang.test_sglang_stale_verdict import SHOW, START_NS
from ansible_collections.gpufleet.llm.tests.unit.plugins.modules.module_runner import run_module


@pytest.fixture
def systemctl(tmp_path, monkeypatch):
    """write(script_body): a fake systemctl first on PATH; its argv are logged to calls.log."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ.get("PATH", "")))

    def write(body):
        path = bindir / "systemctl"
        path.write_text("#!/bin/sh\necho \"$@\" >> %s/calls.log\n%s\n" % (tmp_path, body))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return tmp_path / "calls.log"
    return write


def files(tmp_path, **offsets_ns):
    """Config, env and unit files (and the config's .previous) with mtimes START_NS + offset."""
    out = []
    for name, offset in offsets_ns.items():
        path = tmp_path / name
        path.write_text(name)
        os.utime(path, ns=(START_NS + offset, START_NS + offset))
        out.append(dict(path=str(path), previous=str(path) + ".previous"))
    (tmp_path / "a.yaml.previous").write_text("old")
    return out


def test_lost_handler_is_stale_with_its_previous(capsys, tmp_path, systemctl):
    calls = systemctl("cat <<'EOS'\n%sEOS" % SHOW)
    args = dict(unit="sglang-a.service", files=files(tmp_path, **{"a.yaml": 5000, "a.env": -10 ** 9, "a.service": -1}))
    res = run_module(sglang_stale.main, capsys, args)
    assert res["_rc"] == 0 and not res["changed"]
    assert res["stale"] and res["stale_files"] == [str(tmp_path / "a.yaml")]
    assert res["rollback_sources"] == {str(tmp_path / "a.yaml"): str(tmp_path / "a.yaml.previous")}
    assert "--timestamp=us+utc" in calls.read_text()


def test_up_to_date_server_and_check_mode(capsys, tmp_path, systemctl):
    systemctl("cat <<'EOS'\n%sEOS" % SHOW)
    args = dict(unit="sglang-a.service", files=files(tmp_path, **{"a.yaml": -1000, "a.env": -1000}))
    res = run_module(sglang_stale.main, capsys, args, check_mode=True)
    assert not res["stale"] and res["running"] and res["rollback_sources"] == {}


def test_old_systemd_without_timestamp_option(capsys, tmp_path, systemctl):
    # systemd < 248 refuses --timestamp: the second call has no such option, and the start comes from
    # the monotonic stamp (here: 1 s after the uptime systemd reports, so any file of now is newer).
    calls = systemctl('case "$*" in *--timestamp*) echo "unknown option" >&2; exit 1;; esac\n'
                      "printf 'MainPID=7\\nExecMainPID=7\\nExecMainStartTimestamp=Thu 2026-12-03 17:30:32 UTC\\n"
                      "ExecMainStartTimestampMonotonic=1\\nActiveState=active\\nNeedDaemonReload=no\\n'")
    conf = tmp_path / "u.yaml"
    conf.write_text("port: 1")  # written now: after the start systemd's monotonic stamp gives
    res = run_module(sglang_stale.main, capsys, dict(unit="u.service", files=[dict(path=str(conf), previous=None)]))
    assert res["_rc"] == 0 and res["running"]
    assert res["stale"] and res["stale_files"] == [str(conf)]
    assert len(calls.read_text().splitlines()) == 2


def test_not_installed_unit(capsys, tmp_path, systemctl):
    systemctl("printf 'MainPID=0\\nExecMainStartTimestamp=\\nLoadState=not-found\\nActiveState=inactive\\n"
              "SubState=dead\\nNeedDaemonReload=no\\n'")
    res = run_module(sglang_stale.main, capsys, dict(unit="u.service", files=files(tmp_path, **{"a.yaml": 0})))
    assert not res["stale"] and not res["running"] and res["load_state"] == "not-found"


def test_systemctl_failure_is_named(capsys, tmp_path, systemctl):
    systemctl("echo 'Failed to connect to bus' >&2; exit 1")
    res = run_module(sglang_stale.main, capsys, dict(unit="u.service"))
    assert res["failed"] and res["_rc"] == 1
    assert "systemctl show u.service failed (rc=1): Failed to connect to bus" in res["msg"]


def test_bad_unit_name(capsys, tmp_path, systemctl):
    calls = systemctl("exit 0")
    res = run_module(sglang_stale.main, capsys, dict(unit="--all"))
    assert res["failed"] and "is not a systemd unit name" in res["msg"] and not calls.exists()
