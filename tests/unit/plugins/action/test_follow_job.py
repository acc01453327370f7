# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""follow_job's poll schedule: soon at first, then every ``interval``, and the look for a killed job's
processes (pure functions and the real shell command; the loop itself is driven end to end by the
hf_snapshot integration target's 300-poll scenario and, with real async jobs on localhost, by
tests/unit/playbooks/test_follow_job_killed.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.llm.plugins.action import follow_job


def test_first_polls_come_soon_then_every_interval():
    waits = [follow_job.wait_before(poll, 20.0) for poll in range(1, 10)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0, 20.0]
    # a job that ends at once is seen at the first poll after 0.5 s, not after a whole 20 s interval
    assert sum(waits[:2]) < 2


def test_a_short_interval_is_never_stretched_and_many_polls_do_not_overflow():
    assert [follow_job.wait_before(poll, 0.05) for poll in (1, 2, 300)] == [0.05, 0.05, 0.05]
    assert follow_job.wait_before(10 ** 6, 30.0) == 30.0


def test_the_look_needs_async_wrappers_job_id_shape():
    assert follow_job.wrapper_arg("j324689257118.6269") == "j324689257118"
    assert follow_job.wrapper_arg("413912871.4207") == "413912871"  # older ansible-core: digits only
    # mitogen's own async and anything else: not looked for (counted alive)
    for jid in ("324689257118", "j1.2.3", "job-7", "", "j12.x"):
        assert follow_job.wrapper_arg(jid) is None


@pytest.mark.parametrize("text, verdict", [
    ("j77\ngpufleet-follow-job-n1\nrc=0\n", "alive"),
    ("gpufleet-follow-job-n1\ngpufleet-follow-job-n1\nrc=0\n", "gone"),
    # a process ended while grep read /proc (its file vanished): still a full look
    ("gpufleet-follow-job-n1\nrc=2\n", "gone"),
    ("j77\ngpufleet-follow-job-n1\nrc=2\n", "alive"),
    # what it cannot tell counts as alive
    ("rc=1\n", "unknown"),  # not even the poll's own shell was found: /proc unreadable or hidden
    ("gpufleet-follow-job-other\nrc=0\n", "unknown"),  # another poll's token is no proof
    ("gpufleet-follow-job-n1\nrc=124\n", "unknown"),  # timed out reading a process stuck in the kernel
    ("rc=127\n", "unknown"),  # no grep or no timeout
    ("", "unknown"),
    ("j777\ngpufleet-follow-job-n1\nrc=0\n", "gone"),  # another job's id is not this one
])
def test_the_look_verdict(text, verdict):
    assert follow_job.look_verdict(text, "j77", "n1") == verdict
    assert follow_job.look_verdict(text.replace("\n", "\r\n"), "j77", "n1") == verdict


def test_the_look_finds_a_process_by_one_whole_argument_and_the_polls_own_shell():
    """The real command on this host: a process holding the argument is alive, one holding a longer one is not."""
    arg = "j%d" % (10 ** 11 + os.getpid())
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", arg + "0"], stdin=subprocess.PIPE)
    try:
        out = subprocess.run(["/bin/sh", "-c", follow_job.look_command(arg, "n2")], capture_output=True, text=True, check=True).stdout
        assert follow_job.look_verdict(out, arg, "n2") == "gone"
        out = subprocess.run(["/bin/sh", "-c", follow_job.look_command(arg + "0", "n2")], capture_output=True, text=True,
                             check=True).stdout
        assert follow_job.look_verdict(out, arg + "0", "n2") == "alive"
    finally:
        proc.communicate(b"")
