# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin for gpufleet.llm.follow_job (documented in plugins/modules/follow_job.py).

A flat controller-side loop, so a job of many hours is just many iterations: the model role used to
include a task file from itself per poll, and Ansible's include depth ended the play with a
RecursionError after about 245 polls. Each poll is one shell command on the host (two ``cat``),
not a module run, so a short interval stays cheap; the job's final result comes from the real
async_status module once the results file says the job is no longer running.
"""

from __future__ import annotations

import json
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

    def _poll(self, cmd: str) -> tuple[bool, str | None]:
        """(running, progress line) from one read of the job's results file and the progress file."""
        out = self._low_level_execute_command(cmd, sudoable=True)
        if out.get("rc") != 0:
            raise AnsibleActionFail("could not read the job's files on the host: %s"
                                    % (out.get("stderr") or out.get("stdout") or "rc=%s" % out.get("rc")).strip())
        # over ssh -tt (Ansible's default for commands) the pty turns every newline into CRLF
        stdout = out.get("stdout", "").replace("\r\n", "\n")
        job_text, progress_text = (stdout.split("\n%s\n" % _MARK, 1) + [""])[:2]
        return _running(job_text), _progress_line(progress_text)

    def _follow(self, args: dict[str, Any], *, async_dir: str, host: str, task_vars: dict[str, Any]) -> dict[str, Any]:
        """Poll until the job ended, printing the progress line every poll; the job's result with ``polls``."""
        results_file = self._connection._shell.join_path(async_dir, args["jid"])
        cmd = "cat -- %s 2>/dev/null; printf '\\n%%s\\n' %s" % (shlex.quote(results_file), shlex.quote(_MARK))
        if args["progress_file"]:
            cmd += "; cat -- %s 2>/dev/null" % shlex.quote(args["progress_file"])
        cmd += "; exit 0"
        give_up = time.monotonic() + args["timeout"] + max(_GRACE_SECONDS, 3 * args["interval"])
        polls = 0
        while True:
            polls += 1
            running, line = self._poll(cmd)
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
