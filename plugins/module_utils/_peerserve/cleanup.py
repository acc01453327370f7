# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""peer_serve state=cleaned: what earlier runs left behind after a Ctrl-C or a lost host, found and stopped.

Private to the collection: not a public API, may change without notice. No Ansible imports.

A run killed on the controller never runs the stage's ``always:``: its peer servers keep serving with
their token until RuntimeMaxSec, and its hf_snapshot fetch keeps running as an Ansible async job
(async_wrapper, up to model_fetch_timeout) holding the dest lock. The next run rotates the token, so
that orphaned job gets 401 from every peer and drops them all. Before it starts its own server, a run
therefore stops:

- the peer server units of earlier runs of the same server name, ``gpufleet-peer-<name>-<run>.service``
  (and ``gpufleet-peer-<name>.service`` of releases before runs had ids), and removes their run
  directories (configs with dead tokens) under /run/gpufleet-peer;
- the orphaned hf_snapshot async jobs that hold files open under the models root: a session (async_wrapper
  calls setsid) with a process whose command line is async_wrapper's, wrapping ``AnsiballZ_hf_snapshot.py``.
  Every process group of that session is sent SIGTERM, then SIGKILL; the job's result file (under the
  wrapper's ANSIBLE_ASYNC_DIR, by default ~/.ansible_async) is rewritten as failed, so it no longer says
  "running".

Only processes found through /proc are looked at; nothing is killed by name.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import stat
import time
from typing import Any, Callable

from ansible_collections.gpufleet.llm.plugins.module_utils._common import files as _files
from ansible_collections.gpufleet.llm.plugins.module_utils._peerserve import nginx as _peer_nginx

LIST_UNITS = ["systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager", "--full", "gpufleet-peer-*"]
_WRAPPER = re.compile(r"^(?:AnsiballZ_)?async_wrapper(?:\.py)?$")
_MODULE = "AnsiballZ_hf_snapshot.py"
# How long a stopped job may take to go after SIGTERM, then after SIGKILL (seconds, polled).
TERM_WAIT_SEC = 10.0
KILL_WAIT_SEC = 5.0
_POLL_SEC = 0.05


def parse_list_units(out: str) -> list[dict[str, str]]:
    """``systemctl list-units --all --plain --no-legend`` lines as unit, load, active, sub."""
    units = []
    for line in (out or "").splitlines():
        fields = line.replace("\u25cf", " ").split()
        if len(fields) >= 4 and fields[0].endswith(".service"):
            units.append(dict(unit=fields[0], load=fields[1], active=fields[2], sub=fields[3]))
    return units


def _earlier(name: str) -> re.Pattern:
    """<name> or <name>-<run>: every run of the server ``name``."""
    return re.compile(r"^%s(?:-[a-z0-9]{1,16})?$" % re.escape(name))


def stale_units(units: list[dict[str, str]], name: str, keep: str) -> list[dict[str, str]]:
    """The units of ``name``'s earlier runs (``keep``, the full name of this run, excluded)."""
    pattern = _earlier(name)
    out = []
    for entry in units:
        unit = entry["unit"]
        if not (unit.startswith("gpufleet-peer-") and unit.endswith(".service")):
            continue
        full = unit[len("gpufleet-peer-"):-len(".service")]
        if full != keep and pattern.match(full):
            out.append(entry)
    return out


def stale_dirs(base: str, name: str, keep: str) -> list[str]:
    """The run directories of ``name``'s earlier runs under ``base``."""
    pattern = _earlier(name)
    try:
        entries = sorted(os.listdir(base))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [os.path.join(base, e) for e in entries
            if e != keep and pattern.match(e) and os.path.isdir(os.path.join(base, e))
            and not os.path.islink(os.path.join(base, e))]


# --- orphaned async fetch jobs -----------------------------------------------------------------------

def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _stat(proc: str, pid: int) -> tuple[str, int, int] | None:
    """(state, process group, session) of ``pid`` from /proc/<pid>/stat, None when it is gone."""
    raw = _read(os.path.join(proc, str(pid), "stat"))
    if not raw:
        return None
    fields = raw[raw.rindex(b")") + 2:].split()
    return fields[0].decode(), int(fields[2]), int(fields[3])


def _argv(proc: str, pid: int) -> list[str]:
    raw = _read(os.path.join(proc, str(pid), "cmdline")) or b""
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def _processes(proc: str) -> dict[int, dict[str, Any]]:
    out = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        pid = int(entry)
        st = _stat(proc, pid)
        if st is None or st[0] == "Z":
            continue
        out[pid] = dict(state=st[0], pgid=st[1], sid=st[2], argv=_argv(proc, pid))
    return out


def _wrapper_jid(argv: list[str]) -> str | None:
    """The job id prefix when ``argv`` is async_wrapper's running hf_snapshot, else None."""
    names = [os.path.basename(a) for a in argv]
    if _MODULE not in names:
        return None
    for index, base in enumerate(names):
        if _WRAPPER.match(base) and index + 1 < len(argv):
            return argv[index + 1]
    return None


def _open_under(proc: str, pid: int, root: str) -> list[str]:
    held = []
    fd_dir = os.path.join(proc, str(pid), "fd")
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return held
    for fd in fds:
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith(root + "/"):
            held.append(target)
    return held


def _async_dir(proc: str, pid: int) -> str:
    environ = _read(os.path.join(proc, str(pid), "environ")) or b""
    value = "~/.ansible_async"
    for item in environ.split(b"\0"):
        if item.startswith(b"ANSIBLE_ASYNC_DIR="):
            value = item.split(b"=", 1)[1].decode("utf-8", "replace")
    if value.startswith("~"):
        try:
            home = pwd.getpwuid(os.stat(os.path.join(proc, str(pid))).st_uid).pw_dir
        except (KeyError, OSError):
            home = os.path.expanduser("~")
        value = home + value[1:]
    return value


def find_orphan_jobs(root: str, *, proc: str = "/proc") -> list[dict[str, Any]]:
    """hf_snapshot async jobs that hold a file open under ``root``, one entry per session.

    A job still listing holds nothing under root yet: it is not found (it takes the lock only after the
    listing, seconds later), and is left alone."""
    root = os.path.realpath(root).rstrip("/")
    procs = _processes(proc)
    own = os.getsid(0)
    sessions: dict[int, dict[str, Any]] = {}
    for pid, info in procs.items():
        jid = _wrapper_jid(info["argv"])
        if jid is None or info["sid"] == own:
            continue
        sessions.setdefault(info["sid"], dict(jid=jid, wrapper=pid))
    jobs = []
    for sid, job in sorted(sessions.items()):
        members = sorted(pid for pid, info in procs.items() if info["sid"] == sid)
        held = sorted(set(path for pid in members for path in _open_under(proc, pid, root)))
        if not held:
            continue
        jobs.append(dict(jid=job["jid"], session=sid, pids=members,
                         pgids=sorted(set(procs[pid]["pgid"] for pid in members)),
                         holds=held, async_dir=_async_dir(proc, job["wrapper"])))
    return jobs


def _alive(proc: str, pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        st = _stat(proc, pid)
        if st is not None and st[0] != "Z":
            out.append(pid)
    return out


def _signal_groups(pgids: list[int], sig: int) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass


def _wait_gone(proc: str, pids: list[int], seconds: float, sleep: Callable[[float], None]) -> list[int]:
    waited = 0.0
    alive = _alive(proc, pids)
    while alive and waited < seconds:
        sleep(_POLL_SEC)
        waited += _POLL_SEC
        alive = _alive(proc, pids)
    return alive


def _mark_results(job: dict[str, Any], root: str) -> list[str]:
    """Rewrite the job's result file(s) <async_dir>/<jid>.<pid> as failed: it will never finish."""
    done = []
    directory = job["async_dir"]
    try:
        names = os.listdir(directory)
    except OSError:
        return done
    prefix = job["jid"] + "."
    for entry in sorted(names):
        if not (entry.startswith(prefix) and entry[len(prefix):].isdigit()):
            continue
        path = os.path.join(directory, entry)
        result = dict(failed=True, finished=1, ansible_job_id=entry,
                      msg="stopped by a later run: this hf_snapshot job under %s was orphaned (its play ended "
                          "without waiting for it) and held the lock; peer_serve state=cleaned stopped it" % root)
        try:
            # the job file's own mode: async_status reads it as the job's user
            _files.atomic_write(path, json.dumps(result), stat.S_IMODE(os.stat(path).st_mode))
        except OSError:
            continue
        done.append(path)
    return done


def stop_job(job: dict[str, Any], root: str, *, proc: str = "/proc",
             sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """SIGTERM to every process group of the job's session, SIGKILL to what is left after TERM_WAIT_SEC."""
    _signal_groups(job["pgids"], signal.SIGTERM)
    alive = _wait_gone(proc, job["pids"], TERM_WAIT_SEC, sleep)
    killed = bool(alive)
    if alive:
        _signal_groups(job["pgids"], signal.SIGKILL)
        alive = _wait_gone(proc, job["pids"], KILL_WAIT_SEC, sleep)
    return dict(jid=job["jid"], pids=job["pids"], holds=job["holds"][:5], sigkill=killed, alive=alive,
                results=_mark_results(job, root))


def cleanup(name: str, keep: str, *, root: str | None, units_out: str, stop_unit: Callable[[str, dict], None],
            base: str = _peer_nginx.RUN_BASE, check_mode: bool, proc: str = "/proc",
            sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Stop what earlier runs of ``name`` left (``keep``: this run's full name); ``units_out``: LIST_UNITS' output.

    ``stop_unit(unit, entry)`` stops one unit (the module's systemctl). Returns the lists of what was (or,
    in check mode, would be) stopped and removed."""
    units = stale_units(parse_list_units(units_out), name, keep)
    dirs = stale_dirs(base, name, keep)
    jobs = find_orphan_jobs(root, proc=proc) if root and os.path.isdir(root) else []
    result = dict(stopped_units=[u["unit"] for u in units], removed_dirs=dirs,
                  stopped_jobs=[dict(jid=j["jid"], pids=j["pids"], holds=j["holds"][:5]) for j in jobs])
    if check_mode:
        return result
    for entry in units:
        stop_unit(entry["unit"], entry)
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)
    result["stopped_jobs"] = [stop_job(j, os.path.realpath(root), proc=proc, sleep=sleep) for j in jobs]
    return result
