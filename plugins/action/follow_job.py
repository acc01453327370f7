# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin for gpufleet.llm.follow_job (documented in plugins/modules/follow_job.py).

A flat controller-side loop, so a job of many hours is just many iterations: the model role used to
include a task file from itself per poll, and Ansible's include depth ended the play with a
RecursionError after about 245 polls. Each poll is one shell command on the host (one ``grep`` of
/proc, two ``cat``), not a module run, so a short interval stays cheap; the job's final result comes
from the real async_status module once the results file says the job is no longer running.

A job killed without a trace (``kill -9`` of its process group, the OOM killer, a reboot) leaves its
results file saying "started" for ever: async_wrapper, which would record the end, died with it. So
each poll first looks for the job's async_wrapper processes (their command line holds the job id's
first part as one argument) in ``/proc/*/cmdline``, and only then reads the results file. A job that
ends writes its result before its processes exit, so "no process, then still started" means the job
is gone; seen at two polls in a row, the task fails at once naming the job, instead of polling until
the timeout. Whatever the look cannot tell (no /proc, no grep or timeout, a grep that did not find
the poll's own shell, a read that hung) counts as alive.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

display = Display()

# Separates the job's results file from the progress file in one poll's output.
_MARK = "--gpufleet-follow-job-progress--"
# The first poll comes this soon after the start, and each wait doubles up to ``interval``: a job with
# nothing to do (a re-check of a complete model) is seen ending in about a second, not after a
# whole interval (20 s by default), while a long job is still polled every ``interval``.
_FIRST_WAIT = 0.5
# How long after the job's own async timeout the loop still waits for async_wrapper to write the
# timeout result (it kills the job and records that at the timeout).
_GRACE_SECONDS = 120.0
# Ahead of the results file in one poll's output: what the look for the job's processes found.
_LIVE_MARK = "--gpufleet-follow-job-results--"
# async_wrapper's job id is "<its first argument>.<its pid>" (ansible-core: "j" and digits, older: digits).
# Another shape (mitogen's own async, a job id of something else) is not looked for: counted as alive.
_JID = re.compile(r"^(j?[0-9]+)\.[0-9]+$")
# "No process, then still started" at this many polls in a row: the job is gone.
_GONE_POLLS = 2
# Reading /proc/<pid>/cmdline of a process stuck in the kernel can block: the look gives up after this.
_LOOK_SECONDS = 10
_ARGS = dict(
    jid=dict(type="str", required=True),
    timeout=dict(type="int", required=True),
    progress_file=dict(type="str"),
    interval=dict(type="float", default=20.0),
    idle_line=dict(type="str", default="waiting for the first progress report"),
)


def wait_before(poll: int, interval: float) -> float:
    """Seconds to wait after poll number ``poll`` (1-based): _FIRST_WAIT, doubling, at most ``interval``."""
    return min(interval, _FIRST_WAIT * 2 ** min(poll - 1, 30))


def _running(job_text: str) -> bool:
    """True while the results file is async_wrapper's placeholder (started, not finished).

    Anything else (the module's result, an empty or unreadable file) is for async_status to judge.
    """
    try:
        job = json.loads(job_text)
    except ValueError:
        return False
    return isinstance(job, dict) and bool(job.get("started")) and not job.get("finished") and "invocation" not in job


def wrapper_arg(jid: str) -> str | None:
    """The argument async_wrapper's processes carry for job ``jid``, None for a job id of another shape."""
    match = _JID.match(jid)
    return match.group(1) if match else None


def look_command(arg: str, nonce: str) -> str:
    """Shell that prints every match of the poll's own token and of ``arg`` (a whole argument) in the hosts'
    process command lines, one a line, then ``rc=<grep's exit code>``.

    The poll's own shell holds the token (the ``:`` command), grep's argument does not (``[x]yz`` matches
    ``xyz``): seeing it proves that /proc and grep work here. ``-z`` reads a command line's arguments as
    lines, so ``^arg$`` is one whole argument."""
    token = "gpufleet-follow-job-%s" % nonce
    return (": %s; { timeout %d grep -aozh -e %s -e %s /proc/[0-9]*/cmdline 2>/dev/null; echo \"rc=$?\"; } | tr '\\000' '\\n'"
            % (token, _LOOK_SECONDS, shlex.quote("[%s]%s" % (token[0], token[1:])), shlex.quote("^%s$" % arg)))


def look_verdict(look_text: str, arg: str, nonce: str) -> str:
    """``alive``, ``gone`` (the look worked and found no process of the job) or ``unknown`` (it did not work)."""
    lines = [line.strip() for line in look_text.split("\n")]
    # 0: matches; 2: matches, and a process ended while grep read /proc (its file vanished); others: grep
    # missing (127), timed out (124), killed...
    if not ({"rc=0", "rc=2"} & set(lines)) or "gpufleet-follow-job-%s" % nonce not in lines:
        return "unknown"
    return "alive" if arg in lines else "gone"


def _progress_line(progress_text: str) -> str | None:
    """The ``line`` of a progress file (hf_snapshot's progress.json), None when there is none yet."""
    try:
        progress = json.loads(progress_text)
    except ValueError:
        return None
    line = progress.get("line") if isinstance(progress, dict) else None
    return line if isinstance(line, str) and line else None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        args = self.validate_argument_spec(argument_spec=_ARGS)[1]
        if not args["interval"] > 0:
            raise AnsibleActionFail("interval must be more than 0 seconds, got %s" % args["interval"])
        if args["timeout"] < 1:
            raise AnsibleActionFail("timeout must be at least 1 second (the job's async timeout), got %s" % args["timeout"])
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        host = (task_vars or {}).get("inventory_hostname", "")
        final = self._follow(args, async_dir=async_dir, host=host, task_vars=task_vars or {})
        return merge_hash(result, final)

    def _status(self, jid: str, async_dir: str, task_vars: dict[str, Any]) -> dict[str, Any]:
        """The job's result as the async_status action reports it (started/finished as booleans)."""
        status = self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                      module_args={"jid": jid, "_async_dir": async_dir})
        # a finished job's own result carries neither key
        status["started"] = bool(status.get("started", True))
        status["finished"] = bool(status.get("finished"))
        return status

    def _poll(self, cmd: str, arg: str | None) -> tuple[bool, str | None, str]:
        """(running, progress line, what the look for the job's processes says) from one poll: the look
        first, then one read of the job's results file and of the progress file."""
        nonce = secrets.token_hex(8)
        if arg is not None:
            cmd = "%s; printf '\\n%%s\\n' %s; %s" % (look_command(arg, nonce), shlex.quote(_LIVE_MARK), cmd)
        out = self._low_level_execute_command(cmd, sudoable=True)
        if out.get("rc") != 0:
            raise AnsibleActionFail("could not read the job's files on the host: %s"
                                    % (out.get("stderr") or out.get("stdout") or "rc=%s" % out.get("rc")).strip())
        # over ssh -tt (Ansible's default for commands) the pty turns every newline into CRLF
        stdout = out.get("stdout", "").replace("\r\n", "\n")
        verdict = "alive"
        if arg is not None:
            look_text, stdout = (stdout.split("\n%s\n" % _LIVE_MARK, 1) + [""])[:2]
            verdict = look_verdict(look_text, arg, nonce)
        job_text, progress_text = (stdout.split("\n%s\n" % _MARK, 1) + [""])[:2]
        return _running(job_text), _progress_line(progress_text), verdict

    def _follow(self, args: dict[str, Any], *, async_dir: str, host: str, task_vars: dict[str, Any]) -> dict[str, Any]:
        """Poll until the job ended, printing the progress line every poll; the job's result with ``polls``."""
        results_file = self._connection._shell.join_path(async_dir, args["jid"])
        cmd = "cat -- %s 2>/dev/null; printf '\\n%%s\\n' %s" % (shlex.quote(results_file), shlex.quote(_MARK))
        if args["progress_file"]:
            cmd += "; cat -- %s 2>/dev/null" % shlex.quote(args["progress_file"])
        cmd += "; exit 0"
        give_up = time.monotonic() + args["timeout"] + max(_GRACE_SECONDS, 3 * args["interval"])
        arg = wrapper_arg(args["jid"])
        polls = gone = 0
        while True:
            polls += 1
            running, line, verdict = self._poll(cmd, arg)
            # no process of the job, and after that its results file still said "started": it died unrecorded
            gone = gone + 1 if running and verdict == "gone" else 0
            if gone >= _GONE_POLLS:
                raise AnsibleActionFail(
                    "job %s was killed without a trace: its async_wrapper is gone from the host (no process with %s "
                    "in its command line) and its results file %s still says it is running, at %d polls in a row; "
                    "nothing will ever record its end. Look at the host's kernel log (journalctl -k: the OOM killer, "
                    "a kill -9 of its process group) and its uptime (a reboot)"
                    % (args["jid"], arg, results_file, gone))
            if not running:
                # the results file is no placeholder any more: async_status judges (ended, failed, or
                # an unreadable file that is still being written: then keep polling)
                status = self._status(args["jid"], async_dir, task_vars)
                if status["finished"] or status.get("failed"):
                    status["polls"] = polls
                    return status
            if self._task.no_log:
                # the line is the job's own text: a no_log task shows only that it is alive
                display.display("[%s] poll %d (output hidden by no_log)" % (host, polls))
            else:
                display.display("[%s] %s" % (host, line or args["idle_line"]))
            if time.monotonic() > give_up:
                raise AnsibleActionFail("job %s has not ended %d s after its async timeout (%d s): the host's "
                                        "async_wrapper should have ended it; look at %s on the host"
                                        % (args["jid"], _GRACE_SECONDS, args["timeout"], results_file))
            time.sleep(wait_before(polls, args["interval"]))
