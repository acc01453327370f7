#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# The documentation of the action plugin plugins/action/follow_job.py, which does all the work on
# the controller; there is no module code to run on the host.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: follow_job
short_description: Follow an async job to its end, printing its progress line at every poll
version_added: 0.1.0
description:
  - Polls an Ansible C(async) job started with C(poll=0) until it ends, and prints one line per
    poll on the controller - the C(line) of O(progress_file) (a JSON file the job keeps up to date,
    such as M(gpufleet.llm.hf_snapshot)'s C(dest/.gpufleet/progress.json)), or O(idle_line) while
    there is none.
  - A flat loop on the controller, so a job of many hours is fine (thousands of polls). Each poll is
    one shell command on the host that reads the job's results file and the progress file; when the
    job is no longer running, the job's result comes from M(ansible.builtin.async_status) and is
    this task's result (a failed job fails the task with the job's message).
  - Gives up (fails) when the job has not ended O(timeout) seconds after it started, plus a grace
    period in which C(async_wrapper) records its own timeout.
  - Fails at once when the job was killed without a trace (C(kill -9) of its process group, the OOM killer,
    a reboot), which leaves its results file saying it is running for ever. Each poll first looks for the
    job's C(async_wrapper) processes in C(/proc/*/cmdline) (one C(grep -a) under C(timeout 10); no procps
    needed) and then reads the results file; a job that ends writes its result before its processes exit,
    so no process and then a results file that still says running, at two polls in a row, means the job
    is gone. The message names the job id, its results file and where to look (C(journalctl -k)).
  - That look counts as alive whatever it cannot tell, so it never fails a live job - no C(/proc), no
    C(grep) or C(timeout), a look that did not find the poll's own shell command line (the proof that
    C(/proc) and C(grep) work there), a read of C(/proc) that hung, or a job id not of
    C(async_wrapper)'s shape (mitogen's own async, for example); such a job is followed until O(timeout)
    as before.
  - With C(no_log) on the task, each poll prints only that it happened, not the job's line.
author:
  - gpufleet.llm contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.llm.attributes
attributes:
  check_mode:
    support: full
    details: Only reads; in check mode there is normally no async job to follow (Ansible does not start one).
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Reads only; C(changed) is the job's.
options:
  jid:
    description: The job id, RV(ansible.builtin.async_status#module:ansible_job_id) of the task started with C(async) and C(poll=0).
    type: str
    required: true
  timeout:
    description: The job's C(async) timeout, seconds.
    type: int
    required: true
  progress_file:
    description: Path on the host of a JSON file whose C(line) is printed at every poll. Default no progress file.
    type: str
  interval:
    description:
      - Seconds between polls once the job has run a while (fractions allowed; more than 0). Each poll prints one line.
      - The first polls come sooner, 0.5 s after the start and then twice as long each time up to this, so that a job
        with nothing to do (a re-check of a complete model) is seen ending in about a second rather than after a whole
        interval.
    type: float
    default: 20
  idle_line:
    description: What is printed while the progress file does not exist yet (or holds no C(line)).
    type: str
    default: waiting for the first progress report
notes:
  - The job must run as the same user as this task's polls (the same C(become)), as it does when both
    tasks share their connection settings.
  - The lines are printed on the controller's output as C([host] line); they are not part of the result.
seealso:
  - module: ansible.builtin.async_status
  - module: gpufleet.llm.hf_snapshot
"""

EXAMPLES = r"""
- name: Start the fetch
  gpufleet.llm.hf_snapshot:
    repo_id: org/model
    dest: /srv/models/model/abc
  async: 86400
  poll: 0
  register: fetch_job

- name: Follow it, one progress line every 20 seconds
  gpufleet.llm.follow_job:
    jid: "{{ fetch_job.ansible_job_id }}"
    timeout: 86400
    progress_file: /srv/models/model/abc/.gpufleet/progress.json
    interval: 20
  register: fetch
"""

RETURN = r"""
polls:
  description: How many times the job was polled (one progress line each, but the last).
  returned: always
  type: int
  sample: 412
finished:
  description: Whether the job ended (always true on success).
  returned: always
  type: bool
ansible_job_id:
  description: The job id.
  returned: always
  type: str
"""
