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
    O(concurrency): O(warmup_requests) requests that are not measured, then O(repeats) times a C(POST /flush_cache)
    (O(flush_cache)) and O(num_requests) measured generations built from the prompts in O(prompts) (taken in
    turn), with O(temperature) and C(ignore_eos) so each produces its full C(max_new_tokens). The speculative and
    the baseline run go through the same sequence, so neither measures a cold, just-restarted server or a prefix
    cache the other did not have."
  - "O(api): a chat model (its model directory, C(tokenizer_path) or C(model_path) of C(/server_info), has a
    C(chat_template.jinja) or a C(chat_template) in C(tokenizer_config.json)) gets its prompts as chat messages
    through C(POST /v1/chat/completions), as its users send them; other models get raw text through
    C(POST /generate)."
  - "O(engine=builtin) (the default, needs nothing but Python): one thread per concurrent request slot, each
    streaming one request; per request it records time to first token, end-to-end latency, output tokens and the
    accept length C(completion_tokens / spec_verify_ct) from that request's own answer (C(meta_info) of
    C(/generate), C(sglext.spec_tokens_details) of a chat completion)."
  - "Per level it returns output throughput (output tokens per second of measured wall time, all repeats), each
    repeat's throughput, p50/p90/p99 latency and TTFT, and the accept length as total output tokens over total
    verify steps of its requests. The server's C(/server_info) C(avg_spec_accept_length) is returned as
    information only: SGLang averages it since the last C(/flush_cache) and folds it in at decode-log intervals."
  - "O(engine=bench_serving) runs SGLang's own serving benchmark with O(python) per level and repeat instead:
    C(sglang.benchmark.serving) when O(python) has it (SGLang 0.5.23 deprecates C(sglang.bench_serving)), run
    through a small driver that saves each request's C(spec_accept_length), else C(python -m sglang.bench_serving)
    (then no accept length is measured). ShareGPT-format dataset made from the same prompts, C(--max-concurrency)
    per level, C(--warmup-requests), C(--flush-cache), the temperature in C(--temperature) (and, for the chat
    backend C(sglang-oai-chat), which ignores that, in C(--extra-request-body)). It fails when neither module is importable by O(python)."
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
  admin_api_key:
    description:
      - The server's C(admin-api-key), sent as C(Authorization Bearer) with C(POST /flush_cache) only (in its place
        O(api_key) is sent); never logged or returned.
      - SGLang 0.5.23 admits its admin endpoints, C(/flush_cache) among them, only with the admin key once one is set
        (the API key no longer opens them), so without it such a server refuses the flush (401) and the benchmark fails.
      - With O(engine=bench_serving) it needs C(sglang.benchmark.serving) (the tool's flush gets this key, its requests
        O(api_key)); the deprecated C(sglang.bench_serving) sends one key everywhere and is refused.
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
  temperature:
    description:
      - Sampling temperature of every request.
      - "The default is the Kimi K2.6 model card's setting: \"Unless otherwise specified, all Kimi K2.6
        experiments were conducted with temperature = 1.0, top-p = 1.0\" (top-p stays at SGLang's default, 1.0).
        Greedy decoding (V(0)) flatters speculative decoding: the drafter guesses the argmax far more often than a
        sampled token. Use your model card's recommendation for another model."
    type: float
    default: 1.0
  repeats:
    description:
      - Measured runs of O(num_requests) requests per level, each after a C(/flush_cache).
      - "With 2 or more in both the speculative and the baseline run, the report gives the speedup a 95%
        confidence interval: a Welch t interval on the difference of the mean log throughputs of the two runs
        (they are separate server starts, so the repeats are not paired), i.e. for the ratio of their
        geometric-mean throughputs."
    type: int
    default: 3
  warmup_requests:
    description:
      - Requests sent before each level's measured runs and not measured (they pay for compilation and graph
        capture after a start). Default one per concurrent slot of the level. V(0) sends none.
    type: int
  flush_cache:
    description: C(POST /flush_cache) before every measured run (a server without the route gets a warning).
    type: bool
    default: true
  api:
    description:
      - V(chat) sends each prompt as one user message to C(/v1/chat/completions) (the model's chat template
        applies), V(generate) sends it as raw text to C(/generate), V(auto) uses V(chat) when the server's model
        directory has a chat template and V(generate) otherwise (C(workload.api_reason) says why).
    type: str
    choices: [auto, generate, chat]
    default: auto
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
    repeats: 3
    temperature: 1.0
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
    - Its admission, C(max_running_requests) (the option as SGLang resolved it, 48 when unset with speculative
      decoding in 0.5.23, null when unset without) and C(effective_max_running_requests_per_dp) (what its scheduler
      admits at once per DP rank, from C(internal_states[0])).
  returned: unless check mode
  type: dict
  sample: {"version": "0.5.23", "standin": false, "speculative_algorithm": "DFLASH",
           "model_path": "/srv/models/Kimi-K2.6/3f2a", "tokenizer_path": "/srv/models/Kimi-K2.6/3f2a",
           "avg_spec_accept_length": 3.4, "max_running_requests": 48, "effective_max_running_requests_per_dp": 48}
workload:
  description:
    - The workload as run (prompt file, prompt count per category, requests per level, levels, temperature,
      repeats, warmup_requests, flush_cache, and the API used with the reason, C(api) and C(api_reason)).
  returned: always
  type: dict
levels:
  description:
    - One entry per concurrency level, in order. Times in seconds, throughputs per second.
    - "Keys: concurrency, requests, succeeded, failed, errors, wall_seconds, output_tokens, prompt_tokens,
      output_throughput, request_throughput, latency_s and ttft_s (mean, p50, p90, p99, max), accept_length
      (total tokens / total verify steps of the requests; null without speculative decoding or without
      per-request figures), accept_length_source, verify_steps, server_accept_length (C(/server_info) figure
      since the last C(/flush_cache), folded at decode-log intervals, after the level, information only),
      repeats (per measured run: repeat, requests, wall_seconds, output_tokens, output_throughput, accept_length),
      source."
  returned: unless check mode
  type: list
  elements: dict
records:
  description:
    - One entry per measured request (index, repeat, concurrency, category, api, ok, error, ttft, latency,
      prompt_tokens, output_tokens, spec_verify_ct, accept_length, max_new_tokens, finish_reason); warm-up
      requests are not recorded.
  returned: unless check mode
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.llm.plugins.module_utils._bench import bench as _sglang_bench
from ansible_collections.gpufleet.llm.plugins.module_utils._bench import run as _sglang_bench_run
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure


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
