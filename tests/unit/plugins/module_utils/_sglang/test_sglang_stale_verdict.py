# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_stale's verdict from systemd's properties and the files' mtimes (issue 11 item 4): a server
started before one of its files changed, or whose unit needs a daemon-reload, is stale; one that is
not running never is. Times are given, never read from the clock."""
from __future__ import annotations

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import stale as _sglang_stale

# 2026-12-03T17:30:32.309127Z
START_NS = 1796319032309127000
SHOW = """MainPID=4242
ExecMainStartTimestamp=Thu 2026-12-03 17:30:32.309127 UTC
ExecMainStartTimestampMonotonic=34857561621
ExecMainPID=4242
LoadState=loaded
ActiveState=active
SubState=running
NeedDaemonReload=no
"""


def props(**changes):
    out = _sglang_stale.parse_show(SHOW)
    out.update(changes)
    return out


def test_start_time_to_the_microsecond():
    assert _sglang_stale.started_ns(props(), now_ns=0, monotonic_now_ns=0) == START_NS


def test_old_systemd_start_time_from_the_monotonic_clock():
    # systemd < 248 prints seconds only (and no us+utc): the monotonic stamp is put on the wall clock.
    p = props(ExecMainStartTimestamp="Thu 2026-12-03 17:30:32 UTC")
    now_ns, mono_now_ns = START_NS + 5000000000, 34857561621000 + 5000000000
    assert _sglang_stale.started_ns(p, now_ns=now_ns, monotonic_now_ns=mono_now_ns) == START_NS


def test_no_start_time():
    p = props(ExecMainStartTimestamp="", ExecMainStartTimestampMonotonic="0")
    assert _sglang_stale.started_ns(p, now_ns=1, monotonic_now_ns=1) is None


def test_a_file_written_after_the_start_is_stale():
    mtimes = {"/etc/sglang/a.yaml": START_NS + 1000, "/etc/sglang/a.env": START_NS - 10 ** 9, "/gone": None}
    res = _sglang_stale.decide(props(), mtimes, start_ns=START_NS)
    assert res["stale"] and res["running"] and res["stale_files"] == ["/etc/sglang/a.yaml"]
    assert res["started"] == "2026-12-03T17:30:32.309127Z"
    assert "/etc/sglang/a.yaml changed at 2026-12-03T17:30:32.309128Z" in res["reason"]


def test_files_older_than_the_start_are_up_to_date():
    # The normal path: the handler restarted after the write.
    mtimes = {"/etc/sglang/a.yaml": START_NS - 1000, "/etc/systemd/system/sglang-a.service": START_NS - 1}
    res = _sglang_stale.decide(props(), mtimes, start_ns=START_NS)
    assert not res["stale"] and res["stale_files"] == [] and "after its files last changed" in res["reason"]


def test_unit_changed_without_daemon_reload_is_stale():
    res = _sglang_stale.decide(props(NeedDaemonReload="yes"), {}, start_ns=START_NS)
    assert res["stale"] and res["need_daemon_reload"] and "NeedDaemonReload=yes" in res["reason"]


@pytest.mark.parametrize("changes", [
    dict(MainPID="0", ActiveState="failed", SubState="failed"),
    dict(MainPID="0", ActiveState="activating", SubState="auto-restart"),
    dict(MainPID="0", ActiveState="inactive", SubState="dead", LoadState="not-found"),
    # a main PID that is not the one the start time belongs to
    dict(ExecMainPID="17"),
])
def test_a_server_that_does_not_run_is_never_stale(changes):
    # A start (state: started, or systemd's own restart) reads the files as they are.
    mtimes = {"/etc/sglang/a.yaml": START_NS + 10 ** 9}
    res = _sglang_stale.decide(props(**changes), mtimes, start_ns=START_NS)
    assert not res["stale"] and not res["running"] and res["stale_files"] == []
    assert res["reason"].startswith("not running")


def test_no_start_time_is_not_running():
    res = _sglang_stale.decide(props(NeedDaemonReload="yes"), {"/x": 1}, start_ns=None)
    assert not res["stale"] and not res["running"] and res["need_daemon_reload"]
