# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""peer_serve's logic: nginx as a transient systemd unit (systemd-run) serving model trees to peers.

Private to the collection: not a public API, may change without notice. No Ansible imports: the
commands run through the ``run_command`` the module passes (``AnsibleModule.run_command``).

systemd-run, not a unit file: a transient unit disappears with ``--collect`` when it ends, and
``RuntimeMaxSec`` ends it even when the play that started it was killed, so a forgotten server never
outlives the transfer by more than that. The config file is the unit's whole state: an equal file and
an active unit is an unchanged server; anything else is (re)started from the new file.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import time
from typing import Any, Callable, NamedTuple

from ansible_collections.gpufleet.llm.plugins.module_utils._peerserve import cleanup as _peer_cleanup
from ansible_collections.gpufleet.llm.plugins.module_utils._peerserve import nginx as _peer_nginx
from ansible_collections.gpufleet.llm.plugins.module_utils._common import files as _files
from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.module_utils._common.systemd import RunCommand, parse_show

PEER_UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "MainPID")
# Only file bytes count: error pages (401, 404) are not what a peer came for.
_SERVED_STATUS = ("200", "206")
# The one file under .gpufleet/ the server answers (the peer-status): not a model byte.
_STATUS_PATH = "/.gpufleet/peer-status.json"
# How long a started nginx may take to bind and write its pid file before the start is a failure.
START_WAIT_SEC = 15.0
_POLL_SEC = 0.1
_JOURNAL_LINES = 15


def argument_spec() -> dict[str, dict[str, Any]]:
    """peer_serve's options."""
    return dict(
        state=dict(type="str", default="started", choices=["started", "stopped", "cleaned"]),
        name=dict(type="str", required=True),
        run=dict(type="str"),
        root=dict(type="path"),
        paths=dict(type="list", elements="str", default=[]),
        listen=dict(type="str"),
        port=dict(type="int", default=_peer_nginx.DEFAULT_PORT),
        token=dict(type="str", no_log=True),
        runtime_max_sec=dict(type="int", default=_peer_nginx.DEFAULT_RUNTIME_MAX_SEC),
        nginx=dict(type="path", default=_peer_nginx.DEFAULT_NGINX),
    )


def bytes_sent(log_path: str) -> int:
    """Body bytes of the 200/206 answers in the access log (its first two fields), 0 without a log.

    Model files only: the peers' reads of ``.gpufleet/peer-status.json`` (every second while they
    wait) are not bytes of the model."""
    total = 0
    try:
        with open(log_path, "r", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                fields = line.split(" ", 2)
                if len(fields) < 3 or fields[1] not in _SERVED_STATUS or not fields[0].isdigit():
                    continue
                if _STATUS_PATH in fields[2]:
                    continue
                total += int(fields[0])
    except FileNotFoundError:
        return 0
    return total


class Worker(NamedTuple):
    """Who nginx's workers run as: names for the config, ids for the access check."""
    user: str
    group: str
    uid: int
    gids: tuple


def worker_identity() -> Worker:
    """nobody and its own primary group (nogroup on Debian, nobody elsewhere)."""
    try:
        entry = pwd.getpwnam("nobody")
        group = grp.getgrgid(entry.pw_gid).gr_name
    except KeyError:
        raise ModuleFailure("this host has no 'nobody' user (or its group is missing): peer_serve runs nginx's "
                            "workers as nobody so they can read only world-readable files")
    return Worker(entry.pw_name, group, entry.pw_uid, tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)))


def _may(st: os.stat_result, worker: Worker, bit: int) -> bool:
    """Whether the mode bits give ``worker`` ``bit`` (4 read, 1 search) on ``st``: owner, else group, else other.

    Mode bits, not os.access: the module runs as root, for whom access() says yes to everything."""
    if worker.uid == 0:
        return True
    if st.st_uid == worker.uid:
        return bool((st.st_mode >> 6) & bit)
    if st.st_gid in worker.gids:
        return bool((st.st_mode >> 3) & bit)
    return bool(st.st_mode & bit)


def _owner(st: os.stat_result) -> str:
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return "%s:%s" % (user, group)


def _denied(path: str, worker: Worker, bit: int) -> dict[str, Any] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode) or _may(st, worker, bit):
        return None
    return dict(path=path, mode="%04o" % stat.S_IMODE(st.st_mode), owner=_owner(st),
                need="traverse (x)" if bit == 1 else "read (r)", dir=stat.S_ISDIR(st.st_mode))


def worker_access_problems(root: str, paths: list[str], worker: Worker) -> list[dict[str, Any]]:
    """What ``worker`` cannot reach of the served paths: every directory from / down to each <root>/<path>
    (search), every directory and served file inside it (search, read), and <path>/.gpufleet/ with its
    peer-status.json when present. Paths that do not exist yet (the fetch makes them) are skipped."""
    problems: list[dict[str, Any]] = []
    seen: set = set()

    def add(path: str, bit: int) -> None:
        if path in seen:
            return
        seen.add(path)
        problem = _denied(path, worker, bit)
        if problem:
            problems.append(problem)

    for rel in paths:
        top = os.path.join(root, rel)
        parts = top.strip("/").split("/")
        for depth in range(len(parts) + 1):
            add("/" + "/".join(parts[:depth]), 1)
        if not os.path.isdir(top) or os.path.islink(top):
            continue
        status = os.path.join(top, _peer_nginx.PEER_STATUS)
        if os.path.lexists(status):
            add(os.path.dirname(status), 1)
            add(status, 4)
        for current, dirs, files in os.walk(top):
            # Never served: hf_snapshot's own directory and huggingface_hub's metadata.
            dirs[:] = sorted(d for d in dirs if d not in (".gpufleet", ".cache"))
            for entry in dirs:
                add(os.path.join(current, entry), 1)
            for entry in sorted(files):
                if entry.rsplit(".", 1)[-1] not in _peer_nginx.DENIED_SUFFIXES:
                    add(os.path.join(current, entry), 4)
    return problems


def check_worker_access(root: str, paths: list[str], worker: Worker) -> None:
    """Refuse to serve what the workers cannot read: nginx would answer 404 and every peer wait for nothing."""
    problems = worker_access_problems(root, paths, worker)
    if not problems:
        return
    lines = ["%s (%s, mode %s, owner %s: cannot %s)" % (
        p["path"], "directory" if p["dir"] else "file", p["mode"], p["owner"], p["need"]) for p in problems[:5]]
    more = "" if len(problems) <= 5 else "; and %d more" % (len(problems) - 5)
    raise ModuleFailure(
        "nginx's workers (%s:%s) cannot read what this peer server would serve: %s%s. nginx would answer 404 "
        "for these files and every peer would wait model_peer_wait_timeout for them. Fix: make the directories "
        "0755 and the files 0644 (for example chmod -R u=rwX,go=rX on the path; a umask such as 027 or 077 "
        "when the tree was made leaves them private), then run again" % (
            worker.user, worker.group, "; ".join(lines), more), unreadable=[p["path"] for p in problems])


class PeerUnit(object):
    """The transient unit of one peer server and its run directory."""

    def __init__(self, name: str, run_command: RunCommand, *, base: str, secrets: tuple = ()) -> None:
        self.name = name
        self.unit = _peer_nginx.unit_name(name)
        self.run_command = run_command
        self.base = base
        self.dir = _peer_nginx.run_dir(name, base=base)
        self.conf = os.path.join(self.dir, "nginx.conf")
        self.log = os.path.join(self.dir, "access.log")
        self.pidfile = os.path.join(self.dir, "nginx.pid")
        self.secrets = secrets

    def _run(self, cmd: list, what: str, *, check: bool = True) -> tuple[int, str, str]:
        rc, out, err = self.run_command(cmd)
        if check and rc != 0:
            text = _secrets.mask((err or out or "").strip(), *self.secrets)
            raise ModuleFailure("%s failed (rc %s): %s" % (what, rc, text[-2000:]), unit=self.unit)
        return rc, out, err

    def show(self) -> dict[str, str]:
        out = self._run(["systemctl", "show", "--no-pager", "-p", ",".join(PEER_UNIT_PROPERTIES), self.unit],
                        "systemctl show %s" % self.unit)[1]
        return parse_show(out)

    def journal(self) -> str:
        out, err = self._run(["journalctl", "-u", self.unit, "-n", str(_JOURNAL_LINES), "--no-pager",
                              "-o", "cat"], "journalctl", check=False)[1:]
        return _secrets.mask((out or err or "").strip(), *self.secrets)

    def current_conf(self) -> str | None:
        try:
            with open(self.conf, "r", encoding="utf-8") as handle:
                return handle.read()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def stop(self, props: dict[str, str]) -> None:
        """Stop a loaded unit and forget a failed one (so the name is free for systemd-run)."""
        if props.get("LoadState") == "loaded":
            self._run(["systemctl", "stop", self.unit], "systemctl stop %s" % self.unit)
            self._run(["systemctl", "reset-failed", self.unit], "systemctl reset-failed", check=False)

    def write_conf(self, text: str, nginx: str) -> None:
        """The new config, validated by ``nginx -t`` before it replaces the old one."""
        os.makedirs(self.base, mode=0o700, exist_ok=True)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        os.chmod(self.dir, 0o700)
        # Created 0600 before nginx opens it (O_APPEND keeps the mode): the log is ours, not world-readable.
        os.close(os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        _files.atomic_write(self.conf, text, 0o600, check=lambda new: self._nginx_test(nginx, new))

    def _nginx_test(self, nginx: str, new: str) -> None:
        """``nginx -t`` on the new config before it replaces the old one (ModuleFailure: it stays as it was)."""
        rc, out, err = self._run([nginx, "-t", "-q", "-c", new], "nginx -t", check=False)
        if rc != 0:
            raise ModuleFailure("nginx refused the peer server's config (nginx -t, rc %s): %s" % (
                rc, _secrets.mask((err or out).strip(), *self.secrets)), unit=self.unit)

    def start(self, *, nginx: str, runtime_max_sec: int, sleep: Callable[[float], None] = time.sleep) -> None:
        """systemd-run nginx in the foreground; wait for its pid file (written once it listens)."""
        if os.path.lexists(self.pidfile):
            os.unlink(self.pidfile)
        # Nothing secret on this command line: the token is in the 0600 config only.
        self._run(["systemd-run", "--unit", self.unit, "--collect", "--description",
                   "gpufleet.llm peer server %s" % self.name, "-p", "Type=simple",
                   "-p", "RuntimeMaxSec=%d" % runtime_max_sec,
                   nginx, "-c", self.conf, "-g", "daemon off;"], "systemd-run %s" % self.unit)
        waited = 0.0
        while True:
            props = self.show()
            if props.get("ActiveState") != "active" and props.get("ActiveState") != "activating":
                raise ModuleFailure("%s did not stay up (LoadState=%s ActiveState=%s SubState=%s): is port or address "
                                    "taken, or not on this host? Its journal:\n%s" % (
                                        self.unit, props.get("LoadState"), props.get("ActiveState"),
                                        props.get("SubState"), self.journal()), unit=self.unit)
            if os.path.exists(self.pidfile):
                return
            if waited >= START_WAIT_SEC:
                raise ModuleFailure("%s did not write its pid file within %d s (nginx did not finish starting). Its "
                                    "journal:\n%s" % (self.unit, START_WAIT_SEC, self.journal()), unit=self.unit)
            sleep(_POLL_SEC)
            waited += _POLL_SEC

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _nginx_present(nginx: str) -> None:
    if not (os.path.isfile(nginx) and os.access(nginx, os.X_OK)):
        raise ModuleFailure("nginx is not installed at %s: install nginx-light (the model role does with "
                            "model_distribution: peers), set nginx to where it is, or set model_distribution: hub"
                            % nginx)


def started(peer: PeerUnit, settings: dict[str, Any], *, check_mode: bool) -> dict[str, Any]:
    _nginx_present(settings["nginx"])
    worker = worker_identity()
    check_worker_access(settings["root"], settings["paths"], worker)
    text = _peer_nginx.render(settings, user=worker.user, group=worker.group, base=peer.base)
    props = peer.show()
    active = props.get("ActiveState") == "active"
    same = peer.current_conf() == text
    result = dict(url=_peer_nginx.url(settings["listen"], settings["port"]), unit=peer.unit, run_dir=peer.dir)
    if active and same:
        return dict(result, changed=False, action="none", bytes_sent=bytes_sent(peer.log),
                    msg="%s already serves %s" % (peer.unit, ", ".join(settings["paths"])))
    action = "restart" if active else "start"
    if check_mode:
        return dict(result, changed=True, action=action, bytes_sent=bytes_sent(peer.log),
                    msg="would %s %s (check mode)" % (action, peer.unit))
    peer.write_conf(text, settings["nginx"])
    peer.stop(props)
    peer.start(nginx=settings["nginx"], runtime_max_sec=settings["runtime_max_sec"])
    return dict(result, changed=True, action=action, bytes_sent=bytes_sent(peer.log),
                msg="%s %s serving %s" % (action + "ed", peer.unit, ", ".join(settings["paths"])))


def stopped(peer: PeerUnit, *, check_mode: bool) -> dict[str, Any]:
    props = peer.show()
    loaded = props.get("LoadState") == "loaded"
    result = dict(unit=peer.unit, run_dir=peer.dir, url="")
    if not loaded and not os.path.lexists(peer.dir):
        return dict(result, changed=False, action="none", bytes_sent=0, msg="%s is not running" % peer.unit)
    if check_mode:
        return dict(result, changed=True, action="stop", bytes_sent=bytes_sent(peer.log),
                    msg="would stop %s and remove %s (check mode)" % (peer.unit, peer.dir))
    peer.stop(props)
    # Read after the stop: nginx has written its last line by then.
    sent = bytes_sent(peer.log)
    peer.remove()
    return dict(result, changed=True, action="stop", bytes_sent=sent,
                msg="stopped %s after %d bytes served; removed %s" % (peer.unit, sent, peer.dir))


def cleaned(name: str, peer: PeerUnit, root: str | None, *, keep: str, check_mode: bool) -> dict[str, Any]:
    """Stop the servers of ``name``'s earlier runs (all but ``keep``, this run's full name; "" keeps none),
    remove their run directories, stop orphaned fetch jobs under ``root``."""
    out = peer._run(_peer_cleanup.LIST_UNITS, "systemctl list-units")[1]

    def stop_unit(unit: str, entry: dict) -> None:
        if entry.get("active") in ("active", "activating", "reloading", "deactivating"):
            peer._run(["systemctl", "stop", unit], "systemctl stop %s" % unit)
        peer._run(["systemctl", "reset-failed", unit], "systemctl reset-failed", check=False)

    found = _peer_cleanup.cleanup(name, keep, root=root, units_out=out, stop_unit=stop_unit, base=peer.base,
                                  check_mode=check_mode)
    changed = bool(found["stopped_units"] or found["removed_dirs"] or found["stopped_jobs"])
    what = []
    if found["stopped_units"]:
        what.append("servers %s" % ", ".join(found["stopped_units"]))
    if found["removed_dirs"]:
        what.append("run directories %s" % ", ".join(found["removed_dirs"]))
    for job in found["stopped_jobs"]:
        what.append("orphaned hf_snapshot job %s (pids %s, holding %s)" % (
            job["jid"], " ".join(str(p) for p in job["pids"]), ", ".join(job["holds"][:2])))
    msg = ("%s earlier runs' %s" % ("would stop (check mode)" if check_mode else "stopped", "; ".join(what))
           if changed else "nothing left by earlier runs of %s" % name)
    return dict(found, changed=changed, action="clean" if changed else "none", unit=peer.unit, run_dir=peer.dir,
                url="", bytes_sent=0, msg=msg)


def run(params: dict[str, Any], run_command: RunCommand, *, check_mode: bool,
        base: str | None = None) -> dict[str, Any]:
    """peer_serve for ``params``; raises ModuleFailure with a message naming the problem and the fix.

    ``base``: where run directories go, _peer_nginx.RUN_BASE (read at call time) unless given.
    """
    base = base or _peer_nginx.RUN_BASE
    state = params.get("state") or "started"
    try:
        name = _peer_nginx.check_name(params.get("name"))
        full = _peer_nginx.full_name(name, _peer_nginx.check_run(params.get("run")))
        settings = _peer_nginx.check_settings(params, missing_root_ok=check_mode) if state == "started" else None
    except _peer_nginx.SettingsError as exc:
        raise ModuleFailure(exc.msg)
    peer = PeerUnit(full, run_command, base=base, secrets=(params.get("token"),))
    try:
        if state == "cleaned":
            return cleaned(name, peer, params.get("root"), keep=full if params.get("run") else "",
                           check_mode=check_mode)
        if settings is None:
            return stopped(peer, check_mode=check_mode)
        return started(peer, settings, check_mode=check_mode)
    except OSError as exc:
        # The run directory lives under /run and systemd-run starts a system unit: both need root.
        raise ModuleFailure("peer_serve could not write %s (%s): run it as root (become: true)" % (
            exc.filename or peer.dir, exc.strerror or exc), unit=peer.unit)
