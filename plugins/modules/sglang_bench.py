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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.llm.plugins.module_utils import _sglang_bench, _sglang_bench_run
from ansible_collections.gpufleet.llm.plugins.module_utils._failure import ModuleFailure


def main() -> None:
    module = AnsibleModule(argument_spec=_sglang_bench.argument_spec(), supports_check_mode=True)
    try:
        result = _sglang_bench_run.run(module.params, check_mode=module.check_mode, run_command=module.run_command,
                                       warn=module.warn)
    except ModuleFailure as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
