# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""peer_serve state=cleaned (issue 20 item 8): the units, run directories and orphaned async fetch jobs earlier
runs left. The jobs are real process groups (sh + sleep) whose command line is an Ansible async job's; the unit
listing is recorded systemctl output (systemd-run and systemctl do not work on this controller: PID 1 is not
systemd)."""
from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._peerserve import cleanup as _peer_cleanup

# `systemctl list-units --all --plain --no-legend --no-pager --full 'gpufleet-peer-*'` (systemd 252), with a
# failed unit's bullet as older systemd prints it even with --plain.
RECORDED = """\
gpufleet-peer-models-k3j9x2ab.service loaded active  running gpufleet.llm peer server models-k3j9x2ab
\u25cf gpufleet-peer-models.service     loaded failed  failed  gpufleet.llm peer server models
gpufleet-peer-models-extra-x.service  loaded active  running gpufleet.llm peer server models-extra-x
gpufleet-peer-modelsx.service         loaded active  running gpufleet.llm peer server modelsx
gpufleet-peer-itest.service           loaded active  running gpufleet.llm peer server itest
gpufleet-peer-models-thisrun.service  loaded active  running gpufleet.llm peer server models-thisrun
"""


def test_list_units_parsing_and_which_are_earlier_runs():
    units = _peer_cleanup.parse_list_units(RECORDED)
    assert [u["unit"] for u in units][:2] == ["gpufleet-peer-models-k3j9x2ab.service", "gpufleet-peer-models.service"]
    assert units[1]["active"] == "failed" and units[0]["active"] == "active" and len(units) == 6
    stale = _peer_cleanup.stale_units(units, "models", "models-thisrun")
    # Not another server (itest, modelsx), not a name that is no run id (extra-x), not this run.
    assert [u["unit"] for u in stale] == ["gpufleet-peer-models-k3j9x2ab.service", "gpufleet-peer-models.service"]
    assert _peer_cleanup.parse_list_units("") == []


def test_stale_run_dirs(tmp_path):
    for name in ("models", "models-old1", "models-thisrun", "itest", "models-extra-x"):
        (tmp_path / name).mkdir()
    (tmp_path / "models-file1").write_text("")
    assert _peer_cleanup.stale_dirs(str(tmp_path), "models", "models-thisrun") == [
        str(tmp_path / "models"), str(tmp_path / "models-old1")]
    assert _peer_cleanup.stale_dirs(str(tmp_path / "missing"), "models", "models-x") == []


def _job(tmp_path, root, jid, *, wrapper="AnsiballZ_async_wrapper.py", module="AnsiballZ_hf_snapshot.py"):
    """A process group that looks like an orphaned async hf_snapshot job: sh (argv as async_wrapper's, its own
    session as after async_wrapper's setsid) with a sleep child, both holding the dest lock open. Returns
    (sh Popen, sleep pid) once both exist (read from the pipe: no waiting on the clock)."""
    dest = os.path.join(root, "kimi", "c1", ".gpufleet")
    os.makedirs(dest, exist_ok=True)
    lock = os.open(os.path.join(dest, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    tmp = str(tmp_path / "ansible-tmp-1")
    proc = subprocess.Popen(["sh", "-c", "sleep 600 & echo $!; wait", tmp + "/" + wrapper, jid, "86400",
                             tmp + "/" + module, "_"], stdout=subprocess.PIPE, pass_fds=(lock,),
                            start_new_session=True, env=dict(os.environ, ANSIBLE_ASYNC_DIR=str(tmp_path / "async")))
    os.close(lock)
    sleeper = int(proc.stdout.readline())
    return proc, sleeper


def _gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.fixture
def jobs(tmp_path):
    started = []
    yield started
    for proc, sleeper in started:
        for pid in (proc.pid, sleeper):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()


def test_an_orphaned_fetch_job_under_the_root_is_stopped_and_its_result_marked(tmp_path, jobs):
    root = tmp_path / "models"
    other = tmp_path / "other-models"
    (tmp_path / "async").mkdir()
    (tmp_path / "async" / "j111.4242").write_text(json.dumps({"started": 1, "finished": 0, "ansible_job_id": "j111.4242"}))
    (tmp_path / "async" / "j222.4343").write_text(json.dumps({"started": 1, "finished": 0}))
    jobs.append(_job(tmp_path, str(root), "j111"))
    jobs.append(_job(tmp_path, str(other), "j222"))
    # The same shape without async_wrapper (a synchronous hf_snapshot) is not an orphaned job.
    jobs.append(_job(tmp_path, str(root), "j333", wrapper="not_a_wrapper.py"))
    found = _peer_cleanup.find_orphan_jobs(str(root))
    assert [j["jid"] for j in found] == ["j111"]
    assert found[0]["pids"] == sorted([jobs[0][0].pid, jobs[0][1]])
    assert found[0]["holds"] == [str(root / "kimi" / "c1" / ".gpufleet" / "lock")]
    assert found[0]["async_dir"] == str(tmp_path / "async")

    res = _peer_cleanup.cleanup("models", "models-new1", root=str(root), units_out="", stop_unit=None,
                                base=str(tmp_path / "run"), check_mode=False)
    assert jobs[0][0].wait() == -signal.SIGTERM and _gone(jobs[0][1])
    assert [j["jid"] for j in res["stopped_jobs"]] == ["j111"] and res["stopped_jobs"][0]["alive"] == []
    marked = json.loads((tmp_path / "async" / "j111.4242").read_text())
    assert marked["failed"] and marked["finished"] and "orphaned" in marked["msg"]
    # The other root's job and the non-async process run on, their result untouched.
    assert jobs[1][0].poll() is None and not _gone(jobs[1][1]) and jobs[2][0].poll() is None
    assert json.loads((tmp_path / "async" / "j222.4343").read_text())["finished"] == 0
    # Nothing left: a second clean finds nothing.
    assert _peer_cleanup.find_orphan_jobs(str(root)) == []


def test_check_mode_finds_the_job_and_stops_nothing(tmp_path, jobs):
    root = tmp_path / "models"
    jobs.append(_job(tmp_path, str(root), "j444"))
    res = _peer_cleanup.cleanup("models", "models-new1", root=str(root), units_out="", stop_unit=None,
                                base=str(tmp_path / "run"), check_mode=True)
    assert [j["jid"] for j in res["stopped_jobs"]] == ["j444"]
    assert jobs[0][0].poll() is None and not _gone(jobs[0][1])
