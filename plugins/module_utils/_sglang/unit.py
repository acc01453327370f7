# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_probe's watch on the server's systemd unit while it waits for ``/health``.

Private to the collection: not a public API, may change without notice. No Ansible imports: the
commands run through the ``run_command`` the module passes (``AnsibleModule.run_command``).

SGLang does not listen before its weights are loaded, so a unit that crashes at start
(``Restart=on-failure``, ``RestartSec=10``) answers "connection refused" exactly like a server that
is still loading, until the readiness timeout (an hour) runs out. The unit tells the two apart:
``systemctl show`` says whether the main process exited (``SubState=auto-restart``, ``failed``),
whether systemd restarted it (``NRestarts`` grew) and whether the main PID changed. Any of those
during the wait is a failed probe at once, with the unit's last journal lines in the message.

``NRestarts`` is not judged at the first look, only its growth: ``systemctl restart`` (what the role
does) resets it, but a server that was not restarted by this run may carry restarts from long ago.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable

from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._common.systemd import RunCommand, parse_show

WATCH_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "NRestarts", "MainPID", "ExecMainPID",
                    "ExecMainCode", "ExecMainStatus", "ExecMainStartTimestampMonotonic")
JOURNAL_LINES = 20
# A journal line longer than this is cut: a traceback's one long line must not flood the message.
_LINE_CHARS = 400
# SGLang 0.5.23 logs `server_args={... 'api_key': '<key>', 'admin_api_key': '<key>' ...}` at INFO
# (srt/entrypoints/engine.py), and a launch command names them as `--api-key <key>`: their values are
# masked in quoted journal lines even when the module was not given that key (a line cut at
# _LINE_CHARS may end inside one: the rest of the line goes too).
_LEAKED = re.compile(r"('(?:admin_)?api_key': '|(?:admin_)?api_key='|--(?:admin-)?api-key[ =])('?)([^'\s,)}]*)")


def scrub_journal(text: str) -> str:
    """``text`` with the values SGLang's own log lines give its keys replaced by the mask."""
    return _LEAKED.sub(lambda m: m.group(1) + m.group(2) + (_secrets.MASK if m.group(3) else ""), text)


# ExecMainCode is a CLD_* code of waitid(2).
_CODES = {"1": "exited", "2": "killed", "3": "dumped core"}


class UnitError(Exception):
    """The unit failed, restarted or cannot be read; ``msg`` says which, with the journal."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.msg = msg


def _int(props: dict[str, str], key: str) -> int:
    try:
        return int(props.get(key) or 0)
    except ValueError:
        return 0


def _exit_text(props: dict[str, str]) -> str:
    code = _CODES.get(props.get("ExecMainCode", ""), "")
    if not code:
        return ""
    status = props.get("ExecMainStatus", "?")
    return "; its main process %s (status %s)" % (code, status) if code != "exited" else \
        "; its main process exited with status %s" % status


def verdict(unit: str, first: dict[str, str], now: dict[str, str]) -> str | None:
    """Why the wait must stop now, or None while the unit may still become ready.

    ``first`` is the unit as the probe first saw it, ``now`` as it is now (both ``parse_show``).
    """
    state = "ActiveState=%s SubState=%s" % (now.get("ActiveState", "?"), now.get("SubState", "?"))
    if now.get("LoadState") not in (None, "loaded"):
        return "%s is not loaded (LoadState=%s): is unit the server's service name?" % (unit, now.get("LoadState"))
    if now.get("ActiveState") == "failed":
        return "%s failed (%s, Result=%s, NRestarts %d)%s" % (unit, state, now.get("Result", "?"),
                                                              _int(now, "NRestarts"), _exit_text(now))
    if now.get("SubState") == "auto-restart":
        return "%s crashed: systemd waits to restart it (%s, Result=%s)%s" % (
            unit, state, now.get("Result", "?"), _exit_text(now))
    if now.get("ActiveState") in ("inactive", "deactivating"):
        return "%s is not running (%s): nothing will answer" % (unit, state)
    grew = _int(now, "NRestarts") - _int(first, "NRestarts")
    if grew > 0:
        return "%s was restarted by systemd %d time(s) during the wait (NRestarts %d -> %d, %s)%s" % (
            unit, grew, _int(first, "NRestarts"), _int(now, "NRestarts"), state, _exit_text(now))
    pid0, pid = _int(first, "ExecMainPID"), _int(now, "ExecMainPID")
    if pid0 and pid and pid != pid0:
        return "%s's main process changed during the wait (PID %d -> %d, %s): it was restarted" % (
            unit, pid0, pid, state)
    return None


class UnitWatch(object):
    """Reads the unit at every poll of the readiness wait; raises UnitError when it must stop."""

    def __init__(self, unit: str, run_command: RunCommand, *, secrets: tuple = (),
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.unit = unit
        self.run_command = run_command
        self.secrets = secrets
        self._sleep = sleep
        self.first = None  # type: dict[str, str] | None
        self.looks = 0

    def show(self) -> dict[str, str]:
        cmd = ["systemctl", "show", "--no-pager", "-p", ",".join(WATCH_PROPERTIES), self.unit]
        rc, out, err = self.run_command(cmd)
        if rc != 0:
            raise UnitError("systemctl show %s failed (rc %s): %s" % (self.unit, rc, (err or out).strip()[:_LINE_CHARS]))
        return parse_show(out)

    def check(self) -> dict[str, str]:
        """Look at the unit once (the first look is the baseline); raise UnitError on a crash."""
        now = self.show()
        self.looks += 1
        if self.first is None:
            self.first = now
        why = verdict(self.unit, self.first, now)
        if why:
            raise UnitError("%s. Last journal lines of %s:\n%s" % (why, self.unit, self.journal()))
        return now

    def sleep(self, seconds: float) -> None:
        """wait_healthy's sleep between polls: the unit is read before each pause."""
        self.check()
        self._sleep(seconds)

    def journal(self) -> str:
        """The unit's last journal lines since its first start seen, secrets masked."""
        cmd = ["journalctl", "-u", self.unit, "-n", str(JOURNAL_LINES), "--no-pager", "-o", "short-iso"]
        since = _int(self.first or {}, "ExecMainStartTimestampMonotonic")
        if since:
            # systemd's monotonic clock is CLOCK_MONOTONIC, Python's too: map the start to wall time.
            cmd.append("--since=@%d" % int(time.time() - (time.monotonic() - since / 1e6) - 1))
        rc, out, err = self.run_command(cmd)
        if rc != 0:
            return "(journalctl failed, rc %s: %s)" % (rc, (err or "").strip()[:_LINE_CHARS])
        lines = [line[:_LINE_CHARS] for line in out.splitlines() if line.strip()]
        return scrub_journal(_secrets.mask("\n".join(lines) or "(no journal lines)", *self.secrets))

    def summary(self, props: dict[str, Any]) -> str:
        """The unit's state for the checks list."""
        return "unit: %s %s/%s, NRestarts %s, main PID %s" % (
            self.unit, props.get("ActiveState", "?"), props.get("SubState", "?"), props.get("NRestarts", "?"),
            props.get("ExecMainPID", "?"))
