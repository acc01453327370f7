# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_stale's logic: is the running server older than the files it was started from?

Private to the collection: not a public API, may change without notice.

A play that dies between writing the config, environment or unit and its restart handler leaves a
server running on the old files, and the next run sees nothing to change. The files remember the
write (their mtime) and systemd remembers the start of the process that serves now
(``ExecMainStartTimestamp``). That one, not ``ActiveEnterTimestamp``, because it belongs to the main
process: it moves on every start including systemd's own ``Restart=on-failure`` restarts (which
re-read config and environment), and it is the earliest moment the process could have read its
files, so a write after it is never taken for one before it (at worst one restart too many, never
one too few). ``NeedDaemonReload=yes`` covers a unit file whose change systemd has not loaded.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.module_utils._common.systemd import check_name, parse_show

PROPERTIES = ("LoadState", "ActiveState", "SubState", "MainPID", "ExecMainPID", "ExecMainStartTimestamp",
              "ExecMainStartTimestampMonotonic", "NeedDaemonReload")
# systemctl show --timestamp=us+utc (systemd 248+): wall clock in microseconds, independent of the locale's
# time zone (the command runs with LC_ALL=C, so the day name is English).
US_UTC = "%a %Y-%m-%d %H:%M:%S.%f UTC"


def argument_spec() -> dict[str, dict[str, Any]]:
    """sglang_stale's options."""
    return dict(
        unit=dict(type="str", required=True),
        files=dict(type="list", elements="dict", default=[], options=dict(
            path=dict(type="path", required=True),
            previous=dict(type="path"),
        )),
    )


def started_ns(props: dict[str, str], *, now_ns: int, monotonic_now_ns: int) -> int | None:
    """Wall-clock start of the main process in ns, or None when systemd has none.

    ``ExecMainStartTimestamp`` in the us+utc form is used as it is; an older systemd prints it to the
    second only, so the monotonic stamp is moved onto the wall clock instead (same kernel clocks).
    """
    text = props.get("ExecMainStartTimestamp", "")
    if text and text not in ("n/a", "0"):
        try:
            stamp = datetime.datetime.strptime(text, US_UTC).replace(tzinfo=datetime.timezone.utc)
            return int(stamp.timestamp()) * 1000000000 + stamp.microsecond * 1000
        except ValueError:
            pass
    mono = props.get("ExecMainStartTimestampMonotonic", "")
    if mono.isdigit() and int(mono) > 0:
        return now_ns - (monotonic_now_ns - int(mono) * 1000)
    return None


def _iso(ns: int) -> str:
    stamp = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    return stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _pid(props: dict[str, str], key: str) -> int:
    value = props.get(key, "0")
    return int(value) if value.isdigit() else 0


def decide(props: dict[str, str], mtimes: dict[str, int | None], *, start_ns: int | None) -> dict[str, Any]:
    """The verdict from systemd's properties and the files' mtimes (ns, None for a missing file).

    Only a running main process can be stale: a stopped or failed unit, or one waiting to be restarted
    by systemd itself, starts from the files as they are now.
    """
    main_pid = _pid(props, "MainPID")
    running = main_pid > 0 and _pid(props, "ExecMainPID") in (0, main_pid) and start_ns is not None
    need_reload = props.get("NeedDaemonReload", "no") == "yes"
    result = dict(stale=False, running=running, main_pid=main_pid, load_state=props.get("LoadState", ""),
                  active_state=props.get("ActiveState", ""), sub_state=props.get("SubState", ""),
                  need_daemon_reload=need_reload, started="", stale_files=[], reason="")
    if not running:
        result["reason"] = "not running (%s/%s): a start reads the files as they are" % (
            result["active_state"] or "?", result["sub_state"] or "?")
        return result
    result["started"] = _iso(start_ns)
    newer = sorted(path for path, mtime in mtimes.items() if mtime is not None and mtime > start_ns)
    reasons = ["%s changed at %s" % (path, _iso(mtimes[path])) for path in newer]
    if need_reload:
        reasons.append("the unit changed on disk and systemd has not reloaded it (NeedDaemonReload=yes)")
    result.update(stale_files=newer, stale=bool(reasons))
    result["reason"] = ("started at %s, before: %s" % (result["started"], "; ".join(reasons)) if reasons
                        else "started at %s, after its files last changed" % result["started"])
    return result


def _mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ModuleFailure("cannot stat %s: %s" % (path, exc))


def show(module: Any, unit: str) -> dict[str, str]:
    """The unit's properties from ``systemctl show`` (us+utc timestamps where systemd has them)."""
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        raise ModuleFailure("systemctl not found: the sglang role runs the server as a systemd unit")
    base = [systemctl, "show", "-p", ",".join(PROPERTIES), unit]
    env = dict(LC_ALL="C", TZ="UTC")
    rc, out, err = module.run_command(base[:2] + ["--timestamp=us+utc"] + base[2:], environ_update=env)
    if rc != 0:
        # systemd before 248 has no --timestamp: its monotonic stamp is converted instead.
        rc, out, err = module.run_command(base, environ_update=env)
    if rc != 0:
        raise ModuleFailure("systemctl show %s failed (rc=%d): %s" % (unit, rc, (err or out).strip()))
    return parse_show(out)


def run(module: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The module's result: the verdict and, for each stale file, the previous version kept beside it."""
    problem = check_name(params["unit"])
    if problem:
        raise ModuleFailure(problem)
    props = show(module, params["unit"])
    files = params["files"] or []
    mtimes = dict((f["path"], _mtime_ns(f["path"])) for f in files)
    start = started_ns(props, now_ns=time.time_ns(), monotonic_now_ns=time.monotonic_ns())
    result = decide(props, mtimes, start_ns=start)
    result["rollback_sources"] = dict(
        (f["path"], f["previous"]) for f in files
        if f["path"] in result["stale_files"] and f["previous"] and os.path.exists(f["previous"]))
    result["changed"] = False
    return result
