# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""follow_job with real async jobs on localhost (a real ansible-playbook): a job killed without a trace
fails the task at once, and a healthy job that runs many polls is never taken for a killed one.

Both are driven by events: the test reads the play's output as it comes and acts after the polls it
counts (kill, or let the job end). Every job's processes carry the test's own tmp path (the remote tmp
dir), so a kill reaches this test's job only.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from ansible_collections.gpufleet.llm.tests.unit.fixtures.localplay import play_command

pytestmark = pytest.mark.playbook

# The play must end long before this; it is a guard against a hung test, not a clock the test races.
PLAY_LIMIT = 240
IDLE = "gpufleet-test-job-waits"


def _job_play(tmp_path, shell: str) -> tuple[list[str], dict[str, str]]:
    tasks = [
        {"name": "start", "ansible.builtin.shell": shell, "async": 3600, "poll": 0, "register": "job"},
        {"name": "follow", "register": "followed",
         "gpufleet.llm.follow_job": {"jid": "{{ job.ansible_job_id }}", "timeout": 3600, "interval": 0.2, "idle_line": IDLE}},
        {"name": "out", "ansible.builtin.copy": {"content": "{{ followed | to_json }}", "dest": str(tmp_path / "out.json")}},
    ]
    argv, env = play_command(tmp_path, tasks)
    (tmp_path / "jobtmp").mkdir()
    # the job's async_wrapper and module run from here: their command lines name this test's tmp path
    env.update(ANSIBLE_REMOTE_TMP=str(tmp_path / "jobtmp"), ANSIBLE_ASYNC_DIR=str(tmp_path / "async"), PYTHONUNBUFFERED="1")
    return argv, env


def _processes_naming(text: str) -> list[int]:
    """Pids of the processes whose command line holds ``text`` (never this one)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if text.encode() in cmdline:
            found.append(int(entry))
    return found


def _kill_groups(pids, spare) -> None:
    for group in {os.getpgid(pid) for pid in pids if os.path.exists("/proc/%d" % pid)} - {spare}:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def leave_nothing(tmp_path):
    """After the test: whatever of its job still runs (a failed test) is killed; its processes alone name its tmp path."""
    yield
    _kill_groups(_processes_naming(str(tmp_path / "jobtmp")), os.getpgid(0))


class Play(object):
    """ansible-playbook in its own process group, read line by line."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []

    def read_until(self, want) -> bool:
        """Read lines until ``want(line)``; False when the play ended first."""
        for line in self.proc.stdout:
            self.lines.append(line)
            if want(line):
                return True
        return False

    def finish(self) -> int:
        try:
            rest = self.proc.communicate(timeout=PLAY_LIMIT)[0]
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the play this test started, and its children
            rest = self.proc.communicate()[0]
            self.lines.append(rest)
            pytest.fail("the play did not end within %d s:\n%s" % (PLAY_LIMIT, "".join(self.lines)[-4000:]))
        self.lines.append(rest)
        return self.proc.returncode

    def output(self) -> str:
        return "".join(self.lines)


def _polls(text: str) -> int:
    return text.count("[localhost] %s" % IDLE)


@pytest.mark.usefixtures("leave_nothing")
def test_a_job_killed_without_a_trace_fails_the_follow_at_once(tmp_path):
    argv, env = _job_play(tmp_path, "exec sleep 3600")
    play = Play(argv, env)
    try:
        # the job runs and is being followed: its first poll printed
        assert play.read_until(lambda line: IDLE in line), play.output()
        victims = _processes_naming(str(tmp_path / "jobtmp"))
        assert victims, "no process of the job found: %s" % play.output()
        # every process group of the job (async_wrapper's watcher, and the module's group), never the play's
        _kill_groups(victims, os.getpgid(play.proc.pid))
        seen = len(play.lines)
        rc = play.finish()
    finally:
        if play.proc.poll() is None:
            os.killpg(play.proc.pid, signal.SIGKILL)
            play.proc.communicate()
    out = play.output()
    assert rc != 0, out
    assert "was killed without a trace" in out and "journalctl -k" in out, out
    assert "job j" in out, out  # names the job id
    # at once: the poll running at the kill, then two polls that see no process (the second fails)
    assert _polls("".join(play.lines[seen:])) <= 2, out
    results = list(os.listdir(tmp_path / "async"))
    assert len(results) == 1 and json.loads((tmp_path / "async" / results[0]).read_text()).get("finished") in (0, False)


@pytest.mark.usefixtures("leave_nothing")
def test_a_healthy_job_is_never_taken_for_a_killed_one(tmp_path):
    go = tmp_path / "go"
    argv, env = _job_play(tmp_path, "while [ ! -e %s ]; do sleep 0.05; done; echo the job ended" % go)
    play = Play(argv, env)
    try:
        # 3 polls of a live job: were its processes not found, the second would already have failed the task
        count = [0]

        def third_poll(line):
            count[0] += IDLE in line
            return count[0] >= 3

        assert play.read_until(third_poll), "the play ended before 3 polls:\n%s" % play.output()
        assert _processes_naming(str(tmp_path / "jobtmp")), "the job is not running:\n%s" % play.output()
        go.write_text("")
        rc = play.finish()
    finally:
        if play.proc.poll() is None:
            os.killpg(play.proc.pid, signal.SIGKILL)
            play.proc.communicate()
    out = play.output()
    assert rc == 0, out
    assert "killed without a trace" not in out
    followed = json.loads((tmp_path / "out.json").read_text())
    assert followed["finished"] and followed["stdout"] == "the job ended"
    assert followed["polls"] >= 4
