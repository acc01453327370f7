# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_probe's unit watch (_sglang_unit): the decision logic on RECORDED `systemctl show` outputs.

Only the systemctl/journalctl output is mocked: SHOW below was recorded on a lab host (systemd 252)
from a transient unit `systemd-run -p Restart=on-failure -p RestartSec=2 -p StartLimitBurst=3 sh -c
'...; echo "error: cannot listen on ...: port taken"; exit 1'` at each state it went through, and
from a healthy `sleep 300` unit. The real thing runs in the sglang_role integration target
(scenario_crashloop.sh), where the lab's unit crash-loops for real.
"""
from __future__ import annotations

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._common import systemd
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import unit

UNIT = "sglang-itest.service"
SECRET = "sk-lab-unit-fake-KEY-55aa"  # lab-only, fake

SHOW = {
    "running": """MainPID=79
Result=success
NRestarts=0
ExecMainStartTimestampMonotonic=35121720421
ExecMainPID=79
ExecMainCode=0
ExecMainStatus=0
LoadState=loaded
ActiveState=active
SubState=running
""",
    "missing": """MainPID=0
Result=success
NRestarts=0
ExecMainStartTimestampMonotonic=0
ExecMainPID=0
ExecMainCode=0
ExecMainStatus=0
LoadState=not-found
ActiveState=inactive
SubState=dead
""",
    "crash-first-running": """MainPID=85
Result=success
NRestarts=0
ExecMainStartTimestampMonotonic=35122792422
ExecMainPID=85
ExecMainCode=0
ExecMainStatus=0
LoadState=loaded
ActiveState=active
SubState=running
""",
    "crash-auto-restart": """MainPID=0
Result=exit-code
NRestarts=0
ExecMainStartTimestampMonotonic=35122792422
ExecMainPID=85
ExecMainCode=1
ExecMainStatus=1
LoadState=loaded
ActiveState=activating
SubState=auto-restart
""",
    "crash-second-running": """MainPID=92
Result=success
NRestarts=1
ExecMainStartTimestampMonotonic=35125464534
ExecMainPID=92
ExecMainCode=0
ExecMainStatus=0
LoadState=loaded
ActiveState=active
SubState=running
""",
    "crash-failed": """MainPID=0
Result=exit-code
NRestarts=3
ExecMainStartTimestampMonotonic=35128222450
ExecMainPID=96
ExecMainCode=1
ExecMainStatus=1
LoadState=loaded
ActiveState=failed
SubState=failed
""",
}
# Recorded with the same unit (journalctl -u ... -o short-iso); the key is added to prove the mask.
JOURNAL = """2026-12-03T17:34:58+0000 gpu1 sh[85]: error: cannot listen on 127.0.0.1:30111: port taken
2026-12-03T17:34:58+0000 gpu1 systemd[1]: probe-rec-crash.service: Main process exited, code=exited, status=1/FAILURE
2026-12-03T17:34:58+0000 gpu1 systemd[1]: probe-rec-crash.service: Failed with result 'exit-code'.
2026-12-03T17:34:58+0000 gpu1 sh[85]: api-key %s
""" % SECRET


def _show(name):
    return systemd.parse_show(SHOW[name])


def test_parse_show_reads_every_property():
    props = _show("crash-auto-restart")
    assert set(unit.WATCH_PROPERTIES) == set(props)
    assert props["SubState"] == "auto-restart" and props["ExecMainStatus"] == "1"


@pytest.mark.parametrize("first,now", [("running", "running"), ("crash-first-running", "crash-first-running")])
def test_a_running_unit_keeps_the_wait_going(first, now):
    assert unit.verdict(UNIT, _show(first), _show(now)) is None


def test_auto_restart_is_a_crash():
    why = unit.verdict(UNIT, _show("crash-first-running"), _show("crash-auto-restart"))
    assert why and "crashed" in why and "SubState=auto-restart" in why
    assert "exited with status 1" in why and "Result=exit-code" in why


def test_nrestarts_grew_is_a_restart_even_when_running_again():
    why = unit.verdict(UNIT, _show("crash-first-running"), _show("crash-second-running"))
    assert why and "restarted by systemd 1 time(s)" in why and "NRestarts 0 -> 1" in why


def test_failed_after_the_start_limit():
    why = unit.verdict(UNIT, _show("crash-first-running"), _show("crash-failed"))
    assert why and "failed" in why and "NRestarts 3" in why and "exited with status 1" in why


def test_main_pid_changed_without_nrestarts_is_a_restart():
    # someone ran `systemctl restart` during the wait: NRestarts is reset, the PID is new
    now = dict(_show("crash-second-running"), NRestarts="0")
    why = unit.verdict(UNIT, _show("crash-first-running"), now)
    assert why and "PID 85 -> 92" in why


def test_a_unit_that_is_not_there():
    why = unit.verdict(UNIT, _show("missing"), _show("missing"))
    assert why and "LoadState=not-found" in why


def test_restarts_before_the_wait_are_not_judged():
    # NRestarts=1 at the first look (a restart long ago on a server this run did not restart): no verdict
    assert unit.verdict(UNIT, _show("crash-second-running"), _show("crash-second-running")) is None


class FakeSystemd(object):
    """run_command for UnitWatch: `systemctl show` answers the recorded states in turn (the last one
    repeats); journalctl answers JOURNAL. Records every command."""

    def __init__(self, states, journal=JOURNAL):
        self.states = list(states)
        self.journal = journal
        self.calls = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[0] == "systemctl":
            name = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            return 0, SHOW[name], ""
        return 0, self.journal, ""


def test_watch_raises_at_the_first_look_after_the_crash_with_the_journal_masked():
    fake = FakeSystemd(["crash-first-running", "crash-first-running", "crash-auto-restart"])
    slept = []
    watch = unit.UnitWatch(UNIT, fake, secrets=(SECRET,), sleep=slept.append)
    watch.check()
    watch.sleep(1.0)
    with pytest.raises(unit.UnitError) as exc:
        watch.sleep(1.0)
    assert slept == [1.0]  # no pause after the crash was seen
    assert watch.looks == 3
    msg = exc.value.msg
    assert "crashed" in msg and "port taken" in msg and SECRET not in msg and "api-key ********" in msg
    show = fake.calls[0]
    assert show[:2] == ["systemctl", "show"] and show[-1] == UNIT
    journal = fake.calls[-1]
    assert journal[:3] == ["journalctl", "-u", UNIT] and "--no-pager" in journal
    assert any(a.startswith("--since=@") for a in journal)  # since the first start seen


def test_watch_reports_a_failing_systemctl():
    watch = unit.UnitWatch(UNIT, lambda argv: (1, "", "Failed to connect to bus"))
    with pytest.raises(unit.UnitError) as exc:
        watch.check()
    assert "systemctl show %s failed (rc 1): Failed to connect to bus" % UNIT in exc.value.msg


@pytest.mark.parametrize("name,ok", [("sglang-main.service", True), ("sglang@a.service", True),
                                     ("-H host", False), ("a;reboot", False), ("", False)])
def test_unit_names(name, ok):
    assert (systemd.check_name(name) is None) is ok
