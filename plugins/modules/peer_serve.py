#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: peer_serve
short_description: Serve model directories to the other hosts of a cluster with a temporary, token-protected nginx
version_added: 0.1.0
description:
  - "Starts nginx (Debian's C(nginx-light)) as the transient systemd unit C(gpufleet-peer-<name>-<run>.service)
    (C(gpufleet-peer-<name>.service) without O(run)) with
    C(systemd-run --collect -p RuntimeMaxSec=...): the server ends by itself after O(runtime_max_sec) seconds,
    even when the play that started it was killed."
  - "Serves, over plain HTTP on O(listen):O(port), the regular files under each of O(paths) (directories
    relative to O(root)) with C(sendfile) and C(Range) (C(206)); C(GET) and C(HEAD) only. Every request without
    C(Authorization: Bearer <token>) gets C(401), whatever its path. Anything outside O(paths) is C(404); so
    are directories (no listing), names starting with a dot (all of C(.gpufleet/) except
    C(<path>/.gpufleet/peer-status.json)) and partial downloads (C(*.aria2), C(*.incomplete), C(*.tmp)).
    No symbolic link under O(root) is followed (C(disable_symlinks on)), so none leads out of it."
  - "The configuration is written C(0600) under C(/run/gpufleet-peer/<name>/) (a C(0700) directory that also
    holds the access log, the pid file and nginx's temp directories; errors go to the journal). The token is only
    in that file: never on a command line, in the unit's properties or in the results. The config is checked with
    C(nginx -t) before it is used."
  - "nginx's workers run as C(nobody): they can read the model trees (files C(0644), directories C(0755))
    and nothing private, not even the config. Before it starts, the module checks with nobody's uid and groups
    (mode bits, not C(access(2)) as root) that every directory from C(/) down to each served path, every
    directory and served file inside it and C(.gpufleet/peer-status.json) are reachable, and fails naming each
    path, its mode and owner otherwise (nginx would answer 404 and every peer wait for nothing)."
  - "O(listen) must be an address the other hosts reach this host at: the unspecified address (C(0.0.0.0), C(::)),
    loopback, multicast and link-local addresses are refused at once (every peer is told to fetch from
    C(http://<listen>:<port>/))."
  - "O(state=cleaned) stops what earlier runs of O(name) left after a killed play: every unit
    C(gpufleet-peer-<name>-<run>.service) and C(gpufleet-peer-<name>.service) but this O(run)'s, their run
    directories (configs with dead tokens), and the orphaned C(hf_snapshot) async jobs (the session of an
    C(async_wrapper) process running C(AnsiballZ_hf_snapshot.py)) that hold a file open under O(root), which are
    sent SIGTERM, then SIGKILL, and whose result file under the wrapper's C(ANSIBLE_ASYNC_DIR) is rewritten as
    failed. Changed only when something was stopped or removed."
  - "Idempotent: an active unit started from the same config is left alone (changed=false); a different config
    (paths, address, port, token, O(runtime_max_sec), O(nginx)) restarts it. O(state=stopped) stops the unit,
    reports the bytes it served and removes its run directory."
author:
  - gpufleet.llm maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.llm.attributes
attributes:
  check_mode:
    support: full
    details: Says whether it would start, restart or stop the unit (RV(action)); writes and starts nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  state:
    description:
      - V(started) writes the config and starts (or restarts) the unit when it is not already serving exactly this.
      - V(stopped) stops the unit and removes its run directory.
      - V(cleaned) stops the servers, run directories and fetch jobs earlier runs left (see the description).
        The model role runs it before it starts this run's server.
    type: str
    choices: [started, stopped, cleaned]
    default: started
  name:
    description:
      - The server's name (1 to 41 of C(a-z), C(0-9), C(-), starting with a letter or digit); the unit is
        C(gpufleet-peer-<name>.service).
    type: str
    required: true
  run:
    description:
      - The run the server belongs to (1 to 16 of C(a-z), C(0-9)); the unit is C(gpufleet-peer-<name>-<run>.service)
        and its run directory C(/run/gpufleet-peer/<name>-<run>/). The model role makes one per play.
      - With O(state=cleaned), the run whose server is left alone; without it every run of O(name) is stopped.
    type: str
  root:
    description:
      - The directory that holds O(paths), for example the model role's C(model_models_root). Resolved once;
        symbolic links below it are never followed. Required with O(state=started).
      - With O(state=cleaned), where orphaned fetch jobs are looked for (none without it).
    type: path
  paths:
    description:
      - The directories served, relative to O(root), for example C(kimi/<commit>) (URL C(http://<listen>:<port>/kimi/<commit>/<file>)).
        Each need not exist yet; one that exists must not resolve outside O(root). Required with O(state=started).
    type: list
    elements: str
    default: []
  listen:
    description:
      - The IP address to listen on, the host's cluster address (never a name). Required with O(state=started).
      - Not the unspecified address, loopback, multicast or link-local (with or without a zone).
    type: str
  port:
    description: The TCP port.
    type: int
    default: 8370
  token:
    description:
      - The bearer token every request must carry (16 to 512 of C(A-Z a-z 0-9 . _ ~ + / = -)). Required with
        O(state=started). Changing it restarts the server.
    type: str
  runtime_max_sec:
    description:
      - systemd's C(RuntimeMaxSec) for the unit, the longest the server lives (seconds).
      - Make it longer than the fetches that read from it; the model role passes C(model_fetch_timeout) per model
        plus an hour by default.
    type: int
    default: 21600
  nginx:
    description: The nginx binary.
    type: path
    default: /usr/sbin/nginx
notes:
  - Needs root (a system unit, files under C(/run)).
  - "HTTP, not HTTPS: the token and the bytes cross the cluster network in clear. Bind it to a network only the
    cluster's hosts reach; the bytes are checked against their sha256 by the fetching side."
  - A restarted server keeps its access log, so RV(bytes_sent) counts every start since the run directory was made.
  - "O(state=cleaned) assumes one stage at a time per host and models root: it stops every other run of O(name),
    and a fetch job of another play on the same root. A job still listing (it holds nothing under O(root) yet)
    is not found."
seealso:
  - module: gpufleet.llm.hf_snapshot
  - name: peer_serve documentation
    description: Design, security model, and how to check a running server.
    link: https://github.com/gpufleet/gpufleet.llm/blob/main/docs/peer_serve.md
"""

EXAMPLES = r"""
- name: Stop the servers and fetch jobs an earlier, killed run left
  gpufleet.llm.peer_serve:
    name: fleet
    run: "{{ peer_run }}"
    root: /srv/models
    state: cleaned

- name: Serve this host's copy of the pinned commit to its peers
  gpufleet.llm.peer_serve:
    name: fleet
    run: "{{ peer_run }}"
    root: /srv/models
    paths:
      - "kimi/{{ kimi_commit }}"
    listen: "{{ ansible_host }}"
    token: "{{ peer_token }}"
    runtime_max_sec: 21600
  register: peer

- name: Stop it once every host has its files
  gpufleet.llm.peer_serve:
    name: fleet
    run: "{{ peer_run }}"
    state: stopped
  register: peer_done

- name: Say how much it served
  ansible.builtin.debug:
    msg: "served {{ peer_done.bytes_sent }} bytes"
"""

RETURN = r"""
url:
  description: The base URL of the server (empty with O(state=stopped)); a served file is C(<url><path>/<file>).
  returned: always
  type: str
  sample: "http://10.231.0.12:8370/"
unit:
  description: The systemd unit.
  returned: always
  type: str
  sample: gpufleet-peer-fleet-k3j9x2ab.service
bytes_sent:
  description:
    - Body bytes of the C(200) and C(206) answers in the server's access log since its run directory was
      created (with O(state=stopped), read after the stop; 0 when it was not running).
    - Model files only; the peers' reads of C(.gpufleet/peer-status.json) while they wait are not counted.
  returned: always
  type: int
action:
  description: What was done (or would be, in check mode).
  returned: always
  type: str
  choices: [none, start, restart, stop, clean]
run_dir:
  description: The run directory (config, access log, pid file).
  returned: always
  type: str
  sample: /run/gpufleet-peer/fleet-k3j9x2ab
stopped_units:
  description: With O(state=cleaned), the units of earlier runs stopped (or, in check mode, that would be).
  returned: when state is cleaned
  type: list
  elements: str
  sample: [gpufleet-peer-fleet-a1b2c3d4.service]
removed_dirs:
  description: With O(state=cleaned), the run directories of earlier runs removed.
  returned: when state is cleaned
  type: list
  elements: str
  sample: [/run/gpufleet-peer/fleet-a1b2c3d4]
stopped_jobs:
  description:
    - With O(state=cleaned), the orphaned hf_snapshot async jobs stopped, each with its job id prefix, its
      process ids and the files it held under O(root).
    - After the stop also C(sigkill) (SIGTERM was not enough), C(alive) (processes that outlived SIGKILL too)
      and C(results) (the result files rewritten as failed).
  returned: when state is cleaned
  type: list
  elements: dict
  sample: [{jid: j861937495, pids: [4242, 4250], holds: [/srv/models/kimi/abc/.gpufleet/lock]}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.llm.plugins.module_utils._peerserve import serve as _peer_serve
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure


def main() -> None:
    module = AnsibleModule(argument_spec=_peer_serve.argument_spec(), supports_check_mode=True)
    try:
        result = _peer_serve.run(module.params, module.run_command, check_mode=module.check_mode)
    except ModuleFailure as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
