# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""peer_serve end to end, in-process, against scripted systemctl / systemd-run / journalctl / nginx whose
argv are logged: the token never reaches a command line or the result, start / unchanged / restart / stop,
check mode changes nothing, nginx's refusals and a missing nginx are clear failures."""
from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._peerserve import nginx as _peer_nginx
from ansible_collections.gpufleet.llm.plugins.module_utils._peerserve import serve as _peer_serve
from ansible_collections.gpufleet.llm.plugins.modules import peer_serve
from ansible_collections.gpufleet.llm.tests.unit.plugins.modules.module_runner import run_module

TOKEN = "peerToken-0123456789abcdef"
# The unit's state lives in a file: systemd-run makes it active (and writes the pid file nginx would),
# systemctl stop makes it not-found (a collected transient unit).
SYSTEMCTL = """
case "$1" in
  show) if [ -f "$STATE" ]; then echo LoadState=loaded; echo ActiveState=active; echo SubState=running;
        else echo LoadState=not-found; echo ActiveState=inactive; echo SubState=dead; fi ;;
  stop) rm -f "$STATE" ;;
  list-units) cat "$UNITS" 2>/dev/null || true ;;
esac
"""
SYSTEMD_RUN = """
[ -n "$FAIL_START" ] && exit 0
conf=""; prev=""
for a in "$@"; do [ "$prev" = "-c" ] && conf=$a; prev=$a; done
touch "$STATE"; echo 4242 > "$(dirname "$conf")/nginx.pid"
"""
NGINX = """
if [ -n "$NGINX_REFUSES" ]; then
  echo "nginx: [emerg] bad line: $(grep Bearer "$4")" >&2; exit 1
fi
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake tools first on PATH, the run base in tmp_path; returns the paths the tests read."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls.log"
    for name, body in (("systemctl", SYSTEMCTL), ("systemd-run", SYSTEMD_RUN), ("journalctl", "echo \"bind() failed\""),
                       ("nginx", NGINX)):
        path = bindir / name
        path.write_text("#!/bin/sh\necho %s \"$@\" >> %s\n%s\n" % (name, calls, body))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ.get("PATH", "")))
    monkeypatch.setenv("STATE", str(tmp_path / "unit.active"))
    monkeypatch.setenv("UNITS", str(tmp_path / "units.txt"))
    monkeypatch.setattr(_peer_nginx, "RUN_BASE", str(tmp_path / "run"))
    # The access check as nobody would stop at pytest's 0700 tmp directories: here the workers are the
    # test's own user (the access check has its own tests below, with nobody and a tree under /tmp).
    monkeypatch.setattr(_peer_serve, "worker_identity", lambda: _peer_serve.Worker(
        "nobody", "nogroup", os.getuid(), (os.getgid(),)))
    root = tmp_path / "models"
    (root / "kimi" / "c1").mkdir(parents=True)
    return dict(calls=calls, root=root, nginx=str(bindir / "nginx"), run=tmp_path / "run" / "fleet",
                state=tmp_path / "unit.active", tmp=tmp_path)


def args(fake, **over):
    out = dict(name="fleet", root=str(fake["root"]), paths=["kimi/c1"], listen="10.231.0.12", token=TOKEN,
               runtime_max_sec=900, nginx=fake["nginx"])
    out.update(over)
    return out


def test_start_puts_the_token_in_the_0600_config_only(capsys, fake):
    res = run_module(peer_serve.main, capsys, args(fake), forbidden=TOKEN)
    assert res["_rc"] == 0 and res["changed"] and res["action"] == "start"
    assert res["url"] == "http://10.231.0.12:8370/" and res["unit"] == "gpufleet-peer-fleet.service"
    calls = fake["calls"].read_text()
    assert TOKEN not in calls
    assert ("systemd-run --unit gpufleet-peer-fleet.service --collect --description gpufleet.llm peer server fleet "
            "-p Type=simple -p RuntimeMaxSec=900 %s -c %s/nginx.conf -g daemon off;" % (fake["nginx"], fake["run"])) in calls
    # nginx -t ran on the new config, under its own temp name beside nginx.conf, before it replaced it
    assert re.search(r"nginx -t -q -c %s/\.nginx\.conf\.\S+\n" % re.escape(str(fake["run"])), calls)
    conf = fake["run"] / "nginx.conf"
    assert TOKEN in conf.read_text()
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600 and stat.S_IMODE(fake["run"].stat().st_mode) == 0o700
    assert stat.S_IMODE((fake["run"] / "access.log").stat().st_mode) == 0o600


def test_same_config_is_unchanged_and_a_new_one_restarts(capsys, fake):
    run_module(peer_serve.main, capsys, args(fake))
    fake["calls"].write_text("")
    res = run_module(peer_serve.main, capsys, args(fake))
    assert res["_rc"] == 0 and not res["changed"] and res["action"] == "none"
    assert "systemd-run" not in fake["calls"].read_text() and "stop" not in fake["calls"].read_text()
    res = run_module(peer_serve.main, capsys, args(fake, port=8371))
    assert res["changed"] and res["action"] == "restart" and res["url"] == "http://10.231.0.12:8371/"
    calls = fake["calls"].read_text()
    assert calls.index("systemctl stop gpufleet-peer-fleet.service") < calls.index("systemd-run")
    assert "listen 10.231.0.12:8371;" in (fake["run"] / "nginx.conf").read_text()


def test_a_unit_gone_with_its_config_left_is_started_again(capsys, fake):
    run_module(peer_serve.main, capsys, args(fake))
    fake["state"].unlink()  # RuntimeMaxSec ran out: the unit was collected, the run dir stays
    res = run_module(peer_serve.main, capsys, args(fake))
    assert res["changed"] and res["action"] == "start"


def test_check_mode_changes_nothing(capsys, fake):
    res = run_module(peer_serve.main, capsys, args(fake), check_mode=True)
    assert res["_rc"] == 0 and res["changed"] and res["action"] == "start" and "check mode" in res["msg"]
    assert not fake["run"].exists() and "systemd-run" not in fake["calls"].read_text()
    run_module(peer_serve.main, capsys, args(fake))
    before = (fake["run"] / "nginx.conf").read_text()
    res = run_module(peer_serve.main, capsys, args(fake, port=9000), check_mode=True)
    assert res["changed"] and res["action"] == "restart"
    assert (fake["run"] / "nginx.conf").read_text() == before and fake["state"].exists()
    res = run_module(peer_serve.main, capsys, dict(name="fleet", state="stopped"), check_mode=True)
    assert res["changed"] and res["action"] == "stop" and fake["run"].exists() and fake["state"].exists()


def test_check_mode_on_a_fresh_host_without_root_would_start(capsys, fake):
    res = run_module(peer_serve.main, capsys, args(fake, root=str(fake["root"] / "not-yet")), check_mode=True)
    assert res["_rc"] == 0 and res["changed"] and res["action"] == "start"
    res = run_module(peer_serve.main, capsys, args(fake, root=str(fake["root"] / "not-yet")))
    assert res["_rc"] == 1 and "is not a directory on this host" in res["msg"]


def test_stop_reports_served_bytes_and_removes_the_run_dir(capsys, fake):
    run_module(peer_serve.main, capsys, args(fake))
    (fake["run"] / "access.log").write_text(
        '1000 200 10.0.0.2 [t] "GET /kimi/c1/a HTTP/1.1"\n10 206 10.0.0.2 [t] "GET /kimi/c1/a HTTP/1.1"\n'
        '150 401 10.0.0.3 [t] "GET /kimi/c1/a HTTP/1.1"\n0 200 10.0.0.2 [t] "HEAD /kimi/c1/a HTTP/1.1"\n'
        # the peers' status polls are not model bytes (review: they were counted)
        '40 200 10.0.0.2 [t] "GET /kimi/c1/.gpufleet/peer-status.json HTTP/1.1"\n')
    assert run_module(peer_serve.main, capsys, args(fake))["bytes_sent"] == 1010
    res = run_module(peer_serve.main, capsys, dict(name="fleet", state="stopped"))
    assert res["_rc"] == 0 and res["changed"] and res["bytes_sent"] == 1010
    assert not fake["run"].exists() and not fake["state"].exists()
    res = run_module(peer_serve.main, capsys, dict(name="fleet", state="stopped"))
    assert res["_rc"] == 0 and not res["changed"] and res["bytes_sent"] == 0


def test_nginx_refusal_is_a_failure_with_its_message_and_the_token_masked(capsys, fake, monkeypatch):
    monkeypatch.setenv("NGINX_REFUSES", "1")
    res = run_module(peer_serve.main, capsys, args(fake), forbidden=TOKEN)
    assert res["_rc"] == 1 and "nginx refused the peer server's config" in res["msg"] and "[emerg]" in res["msg"]
    assert not (fake["run"] / "nginx.conf").exists()
    assert not [p.name for p in fake["run"].iterdir() if p.name.startswith(".nginx.conf.")]  # no temp file left
    assert "systemd-run" not in fake["calls"].read_text()


def test_a_server_that_dies_at_start_is_a_failure_with_its_journal(capsys, fake, monkeypatch):
    monkeypatch.setenv("FAIL_START", "1")
    res = run_module(peer_serve.main, capsys, args(fake))
    assert res["_rc"] == 1 and "did not stay up" in res["msg"] and "bind() failed" in res["msg"]


def test_missing_nginx_says_what_to_install(capsys, fake):
    res = run_module(peer_serve.main, capsys, args(fake, nginx="/nonexistent/nginx"))
    assert res["_rc"] == 1
    assert "install nginx-light" in res["msg"] and "model_distribution: hub" in res["msg"]


@pytest.mark.parametrize("over, words", [
    (dict(token=None), "token is required"),
    (dict(listen="gpu1.example"), "is not an IP address"),
    (dict(root="srv/models"), "is not an absolute path"),
    (dict(paths=["kimi/../../../etc"]), "is not a directory relative to root"),
])
def test_bad_arguments_fail_cleanly(capsys, fake, over, words):
    res = run_module(peer_serve.main, capsys, args(fake, **over))
    assert res["_rc"] == 1 and words in res["msg"] and "Traceback" not in res["msg"]
    assert not fake["calls"].exists()


# --- issue 20 item 9: a listen address the peers cannot reach this host at is refused at once ------------

@pytest.mark.parametrize("listen", ["0.0.0.0", "::", "127.0.0.1", "::1", "224.0.0.1", "fe80::1"])
def test_unreachable_listen_addresses_are_refused_before_anything_runs(capsys, fake, listen):
    res = run_module(peer_serve.main, capsys, args(fake, listen=listen))
    assert res["_rc"] == 1 and "listen %s" % listen in res["msg"] and "cluster address" in res["msg"]
    assert "Traceback" not in res["msg"] and not fake["calls"].exists()


# --- issue 20 item 8: the unit carries the run -------------------------------------------------------------

def test_the_unit_and_run_dir_carry_the_run(capsys, fake):
    res = run_module(peer_serve.main, capsys, args(fake, run="r1a2"))
    assert res["_rc"] == 0 and res["unit"] == "gpufleet-peer-fleet-r1a2.service"
    assert res["run_dir"] == str(fake["run"]) + "-r1a2" and os.path.isfile(res["run_dir"] + "/nginx.conf")
    assert "systemd-run --unit gpufleet-peer-fleet-r1a2.service" in fake["calls"].read_text()
    res = run_module(peer_serve.main, capsys, dict(name="fleet", run="r1a2", state="stopped"))
    assert res["_rc"] == 0 and res["changed"] and not os.path.exists(str(fake["run"]) + "-r1a2")
    res = run_module(peer_serve.main, capsys, args(fake, run="R1!"))
    assert res["_rc"] == 1 and "run 'R1!' is not a run id" in res["msg"]


# Recorded from `systemctl list-units --all --plain --no-legend --no-pager --full 'gpufleet-peer-*'` on a lab
# host (systemd 252): systemd-run is not available on this controller (PID 1 is not systemd), so the module's
# unit handling is driven by this text through the fake systemctl.
LIST_UNITS = """\
gpufleet-peer-fleet-k3j9x2ab.service loaded active running gpufleet.llm peer server fleet-k3j9x2ab
gpufleet-peer-fleet.service          loaded failed failed  gpufleet.llm peer server fleet
gpufleet-peer-itest.service          loaded active running gpufleet.llm peer server itest
gpufleet-peer-fleet-new1.service     loaded active running gpufleet.llm peer server fleet-new1
"""


def test_cleaned_stops_earlier_runs_servers_and_removes_their_configs(capsys, fake):
    (fake["run"].parent / "fleet-k3j9x2ab").mkdir(parents=True)
    (fake["run"].parent / "fleet-k3j9x2ab" / "nginx.conf").write_text("# stale token\n")
    (fake["run"].parent / "itest").mkdir()
    (fake["tmp"] / "units.txt").write_text(LIST_UNITS)
    clean = dict(name="fleet", run="new1", state="cleaned", root=str(fake["root"]))
    res = run_module(peer_serve.main, capsys, clean, check_mode=True)
    assert res["changed"] and res["stopped_units"] == ["gpufleet-peer-fleet-k3j9x2ab.service", "gpufleet-peer-fleet.service"]
    assert "systemctl stop" not in fake["calls"].read_text() and (fake["run"].parent / "fleet-k3j9x2ab").exists()
    res = run_module(peer_serve.main, capsys, clean)
    assert res["_rc"] == 0 and res["changed"] and res["action"] == "clean" and res["stopped_jobs"] == []
    assert res["removed_dirs"] == [str(fake["run"].parent / "fleet-k3j9x2ab")]
    calls = fake["calls"].read_text()
    # The active one is stopped, the failed one only forgotten; another server's and this run's are left alone.
    assert "systemctl stop gpufleet-peer-fleet-k3j9x2ab.service" in calls
    assert "systemctl reset-failed gpufleet-peer-fleet.service" in calls and "stop gpufleet-peer-fleet.service" not in calls
    assert "itest" not in calls.replace("list-units", "") and "fleet-new1" not in calls
    assert not (fake["run"].parent / "fleet-k3j9x2ab").exists() and (fake["run"].parent / "itest").exists()
    assert "gpufleet-peer-fleet-k3j9x2ab.service" in res["msg"]


def test_cleaned_with_nothing_stale_is_unchanged(capsys, fake):
    (fake["tmp"] / "units.txt").write_text("gpufleet-peer-itest.service loaded active running x\n")
    res = run_module(peer_serve.main, capsys, dict(name="fleet", run="new1", state="cleaned", root=str(fake["root"])))
    assert res["_rc"] == 0 and not res["changed"] and res["action"] == "none"
    assert res["stopped_units"] == [] and res["removed_dirs"] == [] and res["stopped_jobs"] == []


# --- issue 20 item 6: the workers must be able to read what is served -------------------------------------

@pytest.fixture
def public_root():
    """A models root under /tmp (1777) in a 0755 directory: nobody can reach it unless a test closes a part."""
    top = tempfile.mkdtemp(prefix="gpufleet-peer-access-", dir="/tmp")
    os.chmod(top, 0o755)
    root = os.path.join(top, "models")
    os.makedirs(os.path.join(root, "kimi", "c1", ".gpufleet"), mode=0o755)
    for d in (root, os.path.join(root, "kimi"), os.path.join(root, "kimi", "c1"), os.path.join(root, "kimi", "c1", ".gpufleet")):
        os.chmod(d, 0o755)
    with open(os.path.join(root, "kimi", "c1", "config.json"), "w") as handle:
        handle.write("{}")
    os.chmod(os.path.join(root, "kimi", "c1", "config.json"), 0o644)
    yield root
    shutil.rmtree(top)


def test_a_tree_nobody_cannot_traverse_fails_at_start_naming_path_mode_and_fix(capsys, fake, public_root, monkeypatch):
    monkeypatch.setattr(_peer_serve, "worker_identity", lambda: _peer_serve.Worker("nobody", "nogroup", 65534, (65534,)))
    assert run_module(peer_serve.main, capsys, args(fake, root=public_root))["_rc"] == 0
    run_module(peer_serve.main, capsys, dict(name="fleet", state="stopped"))
    fake["calls"].write_text("")
    # A commit directory made under umask 077.
    os.chmod(os.path.join(public_root, "kimi", "c1"), 0o700)
    res = run_module(peer_serve.main, capsys, args(fake, root=public_root))
    assert res["_rc"] == 1 and "Traceback" not in res["msg"]
    assert "%s/kimi/c1 (directory, mode 0700" % public_root in res["msg"]
    assert "nobody:nogroup" in res["msg"] and "0755" in res["msg"] and "model_peer_wait_timeout" in res["msg"]
    assert res["unreadable"] == [os.path.join(public_root, "kimi", "c1")]
    assert "systemd-run" not in fake["calls"].read_text()


def test_cleaned_without_a_run_stops_every_run_of_the_name(capsys, fake):
    (fake["tmp"] / "units.txt").write_text(LIST_UNITS)
    res = run_module(peer_serve.main, capsys, dict(name="fleet", state="cleaned"))
    assert res["_rc"] == 0 and res["changed"]
    assert res["stopped_units"] == ["gpufleet-peer-fleet-k3j9x2ab.service", "gpufleet-peer-fleet.service",
                                    "gpufleet-peer-fleet-new1.service"]
