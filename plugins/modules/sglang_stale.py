#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_stale
short_description: Tell whether a running SGLang server is older than its config, environment or unit
version_added: 0.1.0
description:
  - "Compares the start of the unit's main process (systemd's C(ExecMainStartTimestamp), to the microsecond)
    with the modification time of each of O(files), and reads systemd's C(NeedDaemonReload). The server is
    stale when it runs and a file changed after it started, or its unit file changed without a daemon-reload:
    what it runs with is not what is on disk (for example a play died between writing the files and its
    restart handler)."
  - "C(ExecMainStartTimestamp) belongs to the process that serves now: it moves on every start, systemd's own
    C(Restart=on-failure) restarts included (they re-read config and environment), and it is the earliest
    moment the process could have read its files, so a doubt ends in a restart, never in a stale server."
  - A unit that is not running (stopped, failed, waiting for systemd to restart it, or not installed) is never
    stale; a start reads the files as they are.
  - Reads only; never reports a change. The C(sglang) role restarts a stale server through its restart handler,
    so the probe and the rollback apply as to any restart.
author:
  - gpufleet.llm maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.llm.attributes
attributes:
  check_mode:
    support: full
    details: Read-only; the same verdict in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  unit:
    description: The systemd unit, for example C(sglang-kimi.service).
    type: str
    required: true
  files:
    description: The files the server is started from. A missing file is ignored.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      previous:
        description: Where its previous version is kept (for RV(rollback_sources)).
        type: path
notes:
  - Needs systemd 248 or later for microsecond start times; an older systemd's monotonic start time is converted
    to the wall clock instead.
seealso:
  - name: sglang role
    description: Restarts a stale server through the same handler, probe and rollback as a changed one.
    link: https://github.com/gpufleet/gpufleet.llm/blob/main/docs/sglang_role.md
"""

EXAMPLES = r"""
- name: Is the server older than its files?
  gpufleet.llm.sglang_stale:
    unit: sglang-kimi.service
    files:
      - path: /etc/sglang/kimi.yaml
        previous: /etc/sglang/kimi.yaml.previous
      - path: /etc/sglang/kimi.env
      - path: /etc/systemd/system/sglang-kimi.service
  register: stale

- name: Restart it
  ansible.builtin.systemd_service:
    name: sglang-kimi.service
    state: restarted
    daemon_reload: true
  when: stale.stale
"""

RETURN = r"""
stale:
  description: The server runs and was started before one of O(files) changed, or its unit needs a daemon-reload.
  returned: always
  type: bool
reason:
  description: Why, in words (the start time and each newer file with its time).
  returned: always
  type: str
  sample: "started at 2026-12-03T17:30:32.309127Z, before: /etc/sglang/kimi.yaml changed at 2026-12-03T17:41:02.100000Z"
running:
  description: The unit has a main process.
  returned: always
  type: bool
main_pid:
  description: Its PID, 0 when none.
  returned: always
  type: int
started:
  description: When the main process started (UTC, ISO 8601); empty when not running.
  returned: always
  type: str
stale_files:
  description: The files changed after the start.
  returned: always
  type: list
  elements: str
need_daemon_reload:
  description: systemd's C(NeedDaemonReload) for the unit.
  returned: always
  type: bool
load_state:
  description: systemd's C(LoadState) (C(not-found) for a unit not installed yet).
  returned: always
  type: str
active_state:
  description: systemd's C(ActiveState).
  returned: always
  type: str
sub_state:
  description: systemd's C(SubState).
  returned: always
  type: str
rollback_sources:
  description: For each stale file whose O(files[].previous) exists, that previous version.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import stale as _sglang_stale
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure


def main() -> None:
    module = AnsibleModule(argument_spec=_sglang_stale.argument_spec(), supports_check_mode=True)
    try:
        result = _sglang_stale.run(module, module.params)
    except ModuleFailure as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
