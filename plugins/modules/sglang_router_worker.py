#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_router_worker
short_description: Add an SGLang server to SGLang's routers, or take it out and let it drain
version_added: 0.1.0
description:
  - "Keeps one worker (an SGLang server, by its URL) present in or absent from every router listed in O(routers)
    (C(sglang-router) 0.3.2, the router the C(gpufleet.llm.sglang_router) role installs), through the router's own
    worker API: C(GET /workers), C(POST /workers), C(DELETE /workers/<id>)."
  - "O(state=present) adds the worker to each router that does not list it (C(POST /workers) with its O(url) and
    O(api_key)) and, with O(wait), waits until every router lists it with C(is_healthy) true. A router registers a
    worker only once the worker's C(/health) answered 2xx, so an unreachable or unhealthy worker fails after
    O(timeout), with what each router says of it."
  - "O(state=absent) first refuses, changing nothing, when removing the worker would leave a router fewer than
    O(min_healthy) other healthy workers. Otherwise it removes the worker from each router that lists it and, with
    O(wait), waits until no router lists it: from then on no router sends it a request. With O(drain) it then
    waits until the worker's own C(GET /v1/loads) (at O(drain_url)) reports 0 running and 0 waiting requests on
    two polls in a row, at most O(drain_timeout) seconds: removal alone does not drain, the requests already sent
    run on."
  - "The worker's id is new on every add, so it is never kept: every call looks the worker up by URL. URLs are
    compared as the same worker when only the case of scheme and host, an explicit default port or a trailing
    slash differ (the router itself keeps each spelling as another worker)."
  - Both keys go only into C(Authorization) headers or the C(POST /workers) body; they never appear in results,
    messages or logs (every answer the module quotes is scrubbed of them).
author:
  - gpufleet.llm maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.llm.attributes
attributes:
  check_mode:
    support: full
    details: Reads every router and reports what would be added or removed (C(changed), RV(added_to),
      RV(removed_from)); the O(min_healthy) refusal applies. Nothing is posted or deleted and nothing is waited for.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  routers:
    description:
      - The base URL of every router, C(http) or C(https), without a path, for example C(http://10.0.4.10:30080).
        The C(gpufleet.llm.sglang_router) role's routers are the hosts of C(sglang_router_group) at
        C(sglang_router_address):C(sglang_router_port).
      - Must not contain credentials; use O(router_api_key).
    type: list
    elements: str
    required: true
  router_api_key:
    description:
      - The key each router's C(/workers) API accepts, sent as C(Authorization Bearer) to the routers only - the
        router's C(--api-key) (the role's C(sglang_router_api_key)). A router started with C(--control-plane-api-keys)
        accepts only those keys with the C(admin) role on C(/workers) instead.
      - Omit for a router without C(--api-key).
    type: str
  url:
    description:
      - The worker's URL as the routers reach it (the sglang role's C(sglang_worker_url)), for example
        C(http://10.0.4.11:30000). This exact string is what is posted (without trailing slash) and what the
        routers connect to.
    type: str
    required: true
  api_key:
    description:
      - The worker's SGLang C(api-key) (the sglang role's C(sglang_api_key)). Passed in the C(POST /workers) body, since a
        worker added at runtime does not get the router's key. Also sent to O(drain_url)'s C(/v1/loads), which
        SGLang guards with it.
    type: str
  state:
    description: Whether the worker must be in every router (V(present)) or in none (V(absent)).
    type: str
    choices: [present, absent]
    default: present
  wait:
    description:
      - V(present) - wait until every router lists the worker with C(is_healthy) true.
      - V(absent) - wait until no router lists it.
      - At most O(timeout) seconds; V(false) returns once the routers accepted the change.
    type: bool
    default: true
  timeout:
    description: Seconds O(wait) waits. V(0) looks once.
    type: float
    default: 600
  min_healthy:
    description:
      - O(state=absent) only. Refuse, changing nothing, when removing O(url) would leave any router that lists it
        fewer than this many other healthy workers (the role's C(sglang_router_min_healthy)). V(0) allows removing
        the last one; the router then answers 503 until a worker is back.
    type: int
    default: 1
  drain:
    description:
      - O(state=absent) only. After the removal, wait until the worker's C(GET /v1/loads) at O(drain_url) reports 0
        running and 0 waiting requests (summed over its data-parallel ranks) on two polls a second apart.
      - A server that refuses the connection (not running) holds no request and counts as drained, with a warning.
      - A router of O(routers) that does not list the worker is named in a warning (it routes nothing to it, so
        there is nothing to take out of it; the router dropped it, or it was never added).
      - Ignored, with a warning, for O(state=present). Check mode does not wait.
    type: bool
    default: false
  drain_url:
    description:
      - Where this host reaches the worker for C(/v1/loads), for example its loopback URL
        C(http://127.0.0.1:30000) when the module runs on the server's host. Default O(url).
    type: str
  drain_timeout:
    description:
      - Seconds O(drain) waits; at least the longest generation you allow (the roll's C(sglang_drain_timeout)).
    type: float
    default: 600
  validate_certs:
    description: Verify the TLS certificates of https routers and workers.
    type: bool
    default: true
  ca_path:
    description: A PEM CA bundle to verify them with.
    type: path
notes:
  - "Measured against the real C(sglang-router) 0.3.2: C(POST /workers) answers 202 and registers in the background
    (the router retries the worker's C(/health) until its C(--worker-startup-timeout-secs)); C(DELETE
    /workers/<id>) answers 202 and queues the removal (the worker leaves C(/workers) when it ran, so the module
    waits for it); a worker that stops answering stays
    listed with C(is_healthy) false. The older C(/add_worker) and C(/remove_worker) answer 404 in 0.3.2."
  - "Runs anywhere the routers (and, with O(drain), O(drain_url)) are reachable; the Python standard library only."
seealso:
  - name: The router role and how the roll uses this module
    description: docs/router.md
    link: https://github.com/gpufleet/gpufleet.llm/blob/main/docs/router.md
  - module: gpufleet.llm.sglang_probe
"""

EXAMPLES = r"""
- name: Take the server out of every router and let it finish its requests
  gpufleet.llm.sglang_router_worker:
    routers: [http://10.0.4.10:30080, http://10.0.4.20:30080]
    router_api_key: "{{ sglang_router_api_key }}"
    url: http://10.0.4.11:30000
    api_key: "{{ sglang_api_key }}"
    state: absent
    min_healthy: 1
    drain: true
    drain_url: http://127.0.0.1:30000
    drain_timeout: 900

- name: Put it back once it is probed, and wait until every router reports it healthy
  gpufleet.llm.sglang_router_worker:
    routers: [http://10.0.4.10:30080, http://10.0.4.20:30080]
    router_api_key: "{{ sglang_router_api_key }}"
    url: http://10.0.4.11:30000
    api_key: "{{ sglang_api_key }}"
    state: present
    timeout: 300
"""

RETURN = r"""
routers:
  description: Each router as the module left it (or found it, in check mode).
  returned: always
  type: list
  elements: dict
  contains:
    url:
      description: The router's base URL.
      type: str
    worker_id:
      description: The router's id of the worker (null when it does not list it). Changes on every add.
      type: str
    listed:
      description: Whether the router lists the worker.
      type: bool
    is_healthy:
      description: Whether the router lists it with C(is_healthy) true.
      type: bool
    healthy_workers:
      description: Workers the router lists as healthy, this one included.
      type: int
  sample: [{"url": "http://10.0.4.10:30080", "worker_id": "186957a0-cdca-436f-bef6-2a69a83813ac", "listed": true,
            "is_healthy": true, "healthy_workers": 4}]
url:
  description: O(url) as posted (no trailing slash).
  returned: always
  type: str
state:
  description: O(state).
  returned: success
  type: str
added_to:
  description: Routers the worker was added to (would be, in check mode).
  returned: always
  type: list
  elements: str
removed_from:
  description: Routers the worker was removed from (would be, in check mode).
  returned: always
  type: list
  elements: str
waited:
  description: Seconds spent waiting for the routers (0 without O(wait) or when nothing was waited for).
  returned: always
  type: float
drained:
  description: Whether the worker was seen drained (O(drain), O(state=absent)).
  returned: always
  type: bool
loads:
  description: The last C(/v1/loads) reading of the drain (null without it).
  returned: always
  type: dict
  contains:
    running:
      description: C(num_running_reqs) summed over the data-parallel ranks (null when the server did not answer).
      type: int
    waiting:
      description: C(num_waiting_reqs), likewise.
      type: int
    dp_ranks:
      description: Entries in C(loads).
      type: int
    polls:
      description: C(/v1/loads) requests made.
      type: int
    waited:
      description: Seconds the drain took.
      type: float
    reachable:
      description: False when nothing answered at O(drain_url) (connection refused).
      type: bool
  sample: {"running": 0, "waiting": 0, "dp_ranks": 1, "polls": 7, "waited": 6.02, "reachable": true}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.module_utils._router import urls as _router_urls
from ansible_collections.gpufleet.llm.plugins.module_utils._router import worker as _router_worker


def main() -> None:
    module = AnsibleModule(argument_spec=_router_worker.argument_spec(), supports_check_mode=True)
    # A password in a URL is refused; it must not be echoed back in the invocation either.
    for password in _router_urls.passwords(module.params):
        module.no_log_values.add(password)
    try:
        result = _router_worker.run(module.params, check_mode=module.check_mode, warn=module.warn)
    except ModuleFailure as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
