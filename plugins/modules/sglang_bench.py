#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench
short_description: Benchmark a running SGLang server (throughput, latency, TTFT, speculative accept length)
version_added: 0.1.0
description:
  - "Runs ON the GPU host against O(url), normally the server's loopback address. For each level in
    O(concurrency) it sends O(num_requests) generations built from the prompts in O(prompts) (taken in turn),
    with temperature 0 and C(ignore_eos) so each produces its full C(max_new_tokens)."
  - "O(engine=builtin) (the default, needs nothing but Python): one thread per concurrent request slot, each
    streaming C(POST /generate); per request it records time to first token, end-to-end latency, output tokens
    and the accept length C(completion_tokens / spec_verify_ct) from C(meta_info)."
  - "Per level it returns output throughput (output tokens per second of wall time), p50/p90/p99 latency and
    TTFT, and the mean accept length as total output tokens over total verify steps, cross-checked with the
    server's own C(/server_info) C(internal_states[0].avg_spec_accept_length)."
  - "O(engine=bench_serving) runs SGLang's own C(python -m sglang.bench_serving) with O(python) per level
    instead (ShareGPT-format dataset made from the same prompts, C(--max-concurrency) per level) and parses its
    JSON result (C(output_throughput), C(accept_length), latency and TTFT percentiles). It fails when
    C(sglang.bench_serving) is not importable by O(python)."
  - "O(label) says which server this is: V(spec) must be running speculative decoding and V(baseline) must not
    (read from C(/server_info) C(speculative_algorithm)); a mismatch fails before any load is sent."
  - "Fails when any request fails, with the partial results, so a playbook can restore the server."
  - Never changes anything on the host or the server.
author:
  - gpufleet.llm maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.llm.attributes
attributes:
  check_mode:
    support: full
    details: Validates the inputs (parameters and the prompt file) and returns the workload; sends no load.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  url:
    description: Base URL of the server (rank 0 of a multi-node server).
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: The server's C(api-key), sent as C(Authorization Bearer); never logged or returned.
    type: str
  prompts:
    description:
      - Path on the host of a JSONL prompt file, one JSON object per line with C(prompt) (string), C(category)
        (V(chat), V(code) or V(math)) and optionally C(max_new_tokens) (overrides O(max_new_tokens) for that
        prompt).
      - The C(gpufleet.llm.benchmark) playbook copies the collection's default set
        (C(playbooks/files/bench-prompts.jsonl)) to the host and passes its path.
    type: path
    required: true
  concurrency:
    description: Concurrency levels, each run in turn with O(num_requests) requests.
    type: list
    elements: int
    default: [1, 8, 32]
  num_requests:
    description: Requests per concurrency level.
    type: int
    default: 32
  max_new_tokens:
    description: Tokens each request generates (unless its prompt line sets its own).
    type: int
    default: 256
  engine:
    description: The load generator.
    type: str
    choices: [builtin, bench_serving]
    default: builtin
  label:
    description: V(spec) for the speculative server, V(baseline) for the same server without speculative options.
    type: str
    choices: [spec, baseline]
    default: spec
  request_timeout:
    description: Seconds one request may take in all (also the read timeout of each streamed step).
    type: float
    default: 600
  python:
    description: The interpreter with SGLang installed, for O(engine=bench_serving).
    type: path
  validate_certs:
    description: Verify the server's TLS certificate for an C(https) O(url).
    type: bool
    default: true
  ca_path:
    description: CA bundle for an C(https) O(url).
    type: path
seealso:
  - module: gpufleet.llm.sglang_bench_report
  - name: benchmark documentation
    description: The playbook, the baseline, the report schema.
    link: https://github.com/gpufleet/gpufleet.llm/blob/main/docs/benchmark.md
notes:
  - Figures against the lab's SGLang stand-in (C(standin=true) in RV(server)) come from its delay model and say
    nothing about GPU performance.
"""

EXAMPLES = r"""
- name: Benchmark the speculative server at three concurrency levels
  gpufleet.llm.sglang_bench:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_api_key }}"
    prompts: /var/tmp/bench-prompts.jsonl
    concurrency: [1, 8, 32]
    num_requests: 64
    max_new_tokens: 256
  register: bench_spec

- name: Same, with SGLang's own bench_serving as the load generator
  gpufleet.llm.sglang_bench:
    prompts: /var/tmp/bench-prompts.jsonl
    engine: bench_serving
    python: /opt/sglang/0.5.23/bin/python
  register: bench_spec
"""

RETURN = r"""
label:
  description: O(label) as given.
  returned: always
  type: str
engine:
  description: The load generator used.
  returned: always
  type: str
url:
  description: The server's base URL.
  returned: always
  type: str
server:
  description:
    - What C(/server_info) said before the run; C(standin=true) for the lab's stand-in, whose figures say nothing
      about GPUs.
  returned: unless check mode
  type: dict
  sample: {"version": "0.5.23", "standin": false, "speculative_algorithm": "DFLASH",
           "model_path": "/srv/models/Kimi-K2.6/3f2a", "avg_spec_accept_length": 3.4, "spec_verify_ct_total": 1200}
workload:
  description: The workload as run (prompt file, prompt count per category, requests per level, levels).
  returned: always
  type: dict
levels:
  description:
    - One entry per concurrency level, in order. Times in seconds, throughputs per second.
    - "Keys: concurrency, requests, succeeded, failed, errors, wall_seconds, output_tokens, prompt_tokens,
      output_throughput, request_throughput, latency_s and ttft_s (mean, p50, p90, p99, max), accept_length
      (total tokens / total verify steps; null without speculative decoding), verify_steps,
      server_accept_length (C(/server_info) after the level), server_accept_length_window (the server's figure
      over this level alone, when it reports C(spec_verify_ct_total)), accept_length_server_diff_pct, source."
  returned: unless check mode
  type: list
  elements: dict
records:
  description:
    - One entry per request (index, concurrency, category, ok, error, ttft, latency, prompt_tokens, output_tokens,
      spec_verify_ct, accept_length, max_new_tokens, finish_reason).
  returned: unless check mode
  type: list
  elements: dict
"""

import json
import os
import shutil
import sys
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.llm.plugins.module_utils import _sglang_bench as bench
from ansible_collections.gpufleet.llm.plugins.module_utils import _sglang_http as http


def _check_label(module, server, label, base):
    algorithm = server.get("speculative_algorithm")
    if label == "spec" and not server["speculative"]:
        module.fail_json(msg="label is spec but the server at %s runs without speculative decoding (/server_info "
                             "speculative_algorithm is %r, no avg_spec_accept_length); benchmark it with "
                             "label=baseline, or check that the speculative config is the one loaded"
                             % (base["url"], algorithm), server=server, **base)
    if label == "baseline" and server["speculative"]:
        module.fail_json(msg="label is baseline but the server at %s still runs speculative decoding "
                             "(speculative_algorithm %s): the baseline config did not take effect; check the "
                             "systemd drop-in and that the service restarted" % (base["url"], algorithm),
                         server=server, **base)


def _run_builtin(module, url, requests, levels_in, base, server):
    params = module.params
    kwargs = dict(api_key=params["api_key"], validate_certs=params["validate_certs"], ca_path=params["ca_path"])
    levels, records = [], []
    before = server
    for concurrency in levels_in:
        level_records, wall = bench.run_level(url, requests, concurrency, request_timeout=params["request_timeout"],
                                              **kwargs)
        after = bench.server_state(url, **kwargs)
        level = bench.aggregate(level_records, wall, concurrency, server_before=before, server_after=after)
        before = after
        levels.append(level)
        records.extend(level_records)
        if level["failed"]:
            module.fail_json(msg=bench.level_failure_message(level, url, params["label"]), levels=levels,
                             records=records, server=server, **base)
    return levels, records


def _run_bench_serving(module, url, requests, levels_in, base, server):
    params = module.params
    python = params["python"] or sys.executable
    rc, out, err = module.run_command([python, "-c", bench.PROBE_SNIPPET], cwd="/")
    if rc != 0:
        module.fail_json(msg="engine=bench_serving: %s cannot import %s (rc %d%s); install SGLang into that "
                             "interpreter, point python at the one that has it, or use engine=builtin"
                             % (python, bench.BENCH_SERVING_MODULE, rc, (": " + err.strip()[-300:]) if err else ""),
                         **base)
    environ = {"OPENAI_API_KEY": params["api_key"]} if params["api_key"] else None
    work = tempfile.mkdtemp(prefix="gpufleet-bench-serving-")
    levels, records = [], []
    try:
        dataset = os.path.join(work, "dataset.json")
        with open(dataset, "w") as handle:
            json.dump(bench.sharegpt_dataset(requests), handle)
        for concurrency in levels_in:
            output = os.path.join(work, "result-c%d.jsonl" % concurrency)
            argv = bench.bench_serving_command(python, url, dataset, output, len(requests), params["max_new_tokens"],
                                               concurrency)
            # cwd /: a stray sglang/ in the working directory must not stand in for the installed one.
            rc, out, err = module.run_command(argv, cwd="/", environ_update=environ)
            if rc != 0 or not os.path.exists(output):
                module.fail_json(msg="%s exited %d at concurrency %d: %s"
                                     % (bench.BENCH_SERVING_MODULE, rc, concurrency, (err or out)[-1500:]),
                                 levels=levels, records=records, server=server, **base)
            with open(output) as handle:
                level, level_records = bench.parse_bench_serving(handle.read(), concurrency)
            levels.append(level)
            records.extend(level_records)
            if level["failed"]:
                module.fail_json(msg=bench.level_failure_message(level, url, params["label"]), levels=levels,
                                 records=records, server=server, **base)
    except bench.BenchError as exc:
        module.fail_json(msg=str(exc), levels=levels, records=records, server=server, **base)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return levels, records


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default=http.DEFAULT_URL),
            api_key=dict(type="str", no_log=True),
            prompts=dict(type="path", required=True),
            concurrency=dict(type="list", elements="int", default=[1, 8, 32]),
            num_requests=dict(type="int", default=32),
            max_new_tokens=dict(type="int", default=256, no_log=False),  # a count, not a secret
            engine=dict(type="str", choices=list(bench.ENGINES), default="builtin"),
            label=dict(type="str", choices=list(bench.LABELS), default="spec"),
            request_timeout=dict(type="float", default=600.0),
            python=dict(type="path"),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    base = dict(changed=False, label=params["label"], engine=params["engine"], url=params["url"])
    problems = bench.validate(params["concurrency"], params["num_requests"], params["max_new_tokens"],
                              params["engine"], params["label"], params["request_timeout"])
    try:
        url = http.validate_base_url(params["url"])
    except http.SGLangHTTPError as exc:
        problems.append(str(exc))
    if problems:
        module.fail_json(msg="; ".join(problems), **base)
    base["url"] = url
    try:
        prompts = bench.load_prompts(params["prompts"])
    except bench.BenchError as exc:
        module.fail_json(msg=str(exc), **base)
    base["workload"] = bench.workload_summary(prompts, params["num_requests"], params["max_new_tokens"],
                                              params["concurrency"], params["engine"], params["prompts"])
    if module.check_mode:
        module.exit_json(**base)

    requests = bench.build_requests(prompts, params["num_requests"], params["max_new_tokens"])
    kwargs = dict(api_key=params["api_key"], validate_certs=params["validate_certs"], ca_path=params["ca_path"])
    try:
        server = bench.server_state(url, **kwargs)
        _check_label(module, server, params["label"], base)
        if server["standin"]:
            module.warn("the server at %s is the lab's SGLang stand-in: its figures come from its delay model and say "
                        "nothing about GPU performance" % url)
        run = _run_builtin if params["engine"] == "builtin" else _run_bench_serving
        levels, records = run(module, url, requests, params["concurrency"], base, server)
    except (bench.BenchError, http.SGLangHTTPError) as exc:
        module.fail_json(msg=str(exc), **base)
    for level in levels:
        diff = level.get("accept_length_server_diff_pct")
        if diff is not None and abs(diff) > 5.0:
            module.warn("concurrency %d: the accept length measured from the requests (%.3f) and the server's "
                        "/server_info figure (%.3f) differ by %.1f%% (other traffic on the server?)"
                        % (level["concurrency"], level["accept_length"],
                           level["server_accept_length_window"] or level["server_accept_length"], diff))
    module.exit_json(server=server, levels=levels, records=records, **base)


if __name__ == "__main__":
    main()
