#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_probe
short_description: Check that a running SGLang server is healthy, serves the expected model and generates
version_added: 0.1.0
description:
  - "Waits until the server's C(/health) answers 200 (polling every O(interval) seconds for at most O(timeout)
    seconds: loading a 589 GB model takes many minutes), then checks that C(/model_info) reports O(expect_model_path)
    as its C(model_path), runs one smoke generation through C(/generate) (temperature 0), and reads the version and
    the speculative decoding accept length from C(/server_info)."
  - "With O(unit), the service is read (C(systemctl show)) before every C(/health) poll: a unit that failed, crashed
    (C(SubState=auto-restart)) or was restarted (C(NRestarts) grew, the main PID changed) during the wait fails the
    probe at once, with the unit's last journal lines (since its start, the API key masked) in the message. SGLang does
    not listen before its weights are loaded, so without O(unit) a crash-looping server looks like a loading one until
    O(timeout)."
  - "With O(min_accept_length) above 0 the server must be speculative, and the accept length of a sample
    (O(accept_requests) different prompts of O(accept_max_new_tokens) new tokens each, 16 at a time), pooled as the
    sum of their completion tokens over the sum of their verify steps (C(spec_verify_ct)), must reach the minimum.
    The sample is sent as M(gpufleet.llm.sglang_bench) sends its requests, through its client - a chat model
    (a chat template in its model directory) gets C(/v1/chat/completions), so the server applies the template; any
    other model C(/generate) - streamed, at O(accept_temperature) (the benchmark's 1.0), with C(ignore_eos).
    RV(accept_sample.request) states the shape. A sample with fewer than 2 requests reporting verify steps or fewer than
    O(accept_min_tokens) tokens is reported with a warning and not judged. The server's
    C(internal_states[0].avg_spec_accept_length) is reported only."
  - "Every failure names what failed, the URL path, the numbers and a fix (for example the service's journal)."
  - Sends the API key, when set, only as an C(Authorization) bearer header; it never appears in results or messages.
  - "Runs on the host the server runs on (the default O(url) is loopback) with the Python standard library only
    (and C(systemctl)/C(journalctl) with O(unit); reading another service's journal needs root or the
    C(systemd-journal) group)."
  - Never reports a change.
author:
  - gpufleet.llm maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.llm.attributes
attributes:
  check_mode:
    support: full
    details: Read-only; check mode runs the same checks, the smoke generation included (it changes nothing on the server).
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  url:
    description:
      - Base URL of the server, C(http) or C(https), without a path. The C(sglang) role's C(sglang_service.url).
      - Must not contain credentials; use O(api_key).
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description:
      - The server's C(api-key). Sent as C(Authorization Bearer) to every endpoint when set.
      - Without it, a server that has an API key fails the probe with an authentication error.
    type: str
  admin_api_key:
    description:
      - The server's C(admin-api-key). Never sent (the probe uses no admin endpoint); masked in the journal lines a
        failed probe quotes with O(unit), where SGLang logs its server arguments at start.
    type: str
  timeout:
    description:
      - Seconds to wait for C(/health) to answer 200. V(0) polls once.
    type: float
    default: 3600
  interval:
    description: Seconds between C(/health) polls.
    type: float
    default: 5
  request_timeout:
    description: Seconds one request may take (the smoke generation included); each C(/health) poll waits at most 30.
    type: float
    default: 300
  expect_model_path:
    description:
      - The path the server must report as C(model_path) in C(/model_info), compared after normalisation (C(//),
        C(/./), trailing slashes). Symlinks are not resolved on purpose, so a server configured with
        C(<name>/current) does not pass for a commit directory.
      - Omit to skip the check.
    type: path
  smoke:
    description: Run one generation through C(/generate) and require at least one token back.
    type: bool
    default: true
  smoke_prompt:
    description: The prompt of the smoke generation.
    type: str
    default: The capital of France is
  smoke_max_new_tokens:
    description: C(max_new_tokens) of the smoke generation.
    type: int
    default: 16
  min_accept_length:
    description:
      - Minimum speculative decoding accept length (tokens per verify step), judged on the pooled sample
        (O(accept_requests), O(accept_max_new_tokens)). V(0) does not check and sends no sample.
      - Above 0, a server without speculative decoding fails the probe.
      - The default V(0) is not a measured figure; the documentation says which figures exist and how to set it
        from the speculative arm of a benchmark.
    type: float
    default: 0
  accept_requests:
    description:
      - Requests in the accept-length sample, each with another prompt (eight built-in prompts of different kinds,
        cycled), 16 at a time. Only with O(min_accept_length) above 0.
      - "Why 8 x 256: the tokens one verify step accepts have a standard deviation of 2 to 3 and vary by prompt;
        2048 tokens are about 800 verify steps at an accept length of 2.5, a standard error near 0.1.
        See the documentation."
    type: int
    default: 8
  accept_max_new_tokens:
    description: C(max_new_tokens) of each sample request.
    type: int
    default: 256
  accept_api:
    description:
      - How the sample is sent, decided as M(gpufleet.llm.sglang_bench) decides its O(gpufleet.llm.sglang_bench#module:api)
        (the role passes C(sglang_bench_api)).
      - V(auto) sends chat (C(/v1/chat/completions), the chat template applied) when the server's model directory
        (C(tokenizer_path) or C(model_path) from C(/server_info), read on this host) has C(chat_template.jinja) or a
        C(chat_template) in C(tokenizer_config.json), else C(/generate) with the raw text.
    type: str
    choices: [auto, generate, chat]
    default: auto
  accept_temperature:
    description:
      - Sampling temperature of the sample's requests; the benchmark's (the role passes C(sglang_bench_temperature)).
      - V(1.0) is what the Kimi K2.6 model card evaluates at; greedy decoding (V(0)) inflates the accept length.
    type: float
    default: 1.0
  accept_min_tokens:
    description:
      - The sample is judged only when its requests generated at least this many tokens together (and at least
        2 of them report C(spec_verify_ct)); a smaller sample (requests that stopped early) is reported with a
        warning, not judged.
    type: int
    default: 1024
  unit:
    description:
      - The server's systemd unit (the C(sglang) role's C(sglang_service.unit)), watched while waiting for
        C(/health); a unit that fails, crashes or restarts fails the probe at once, with its journal.
      - Omit to wait for C(/health) only.
    type: str
  validate_certs:
    description: Verify the server's TLS certificate (https only).
    type: bool
    default: true
  ca_path:
    description: A PEM CA bundle to verify the server's certificate with (https only).
    type: path
seealso:
  - name: sglang_probe documentation
    description: The checks, the messages and how the accept length is read.
    link: https://github.com/gpufleet/gpufleet.llm/blob/main/docs/sglang_probe.md
  - module: gpufleet.llm.sglang_preflight
notes:
  - "SGLang's own endpoints are used: C(/health), C(/model_info) and C(/server_info) (or C(/get_model_info) and
    C(/get_server_info) on servers without the newer names), C(/generate)."
  - "Against the lab's SGLang stand-in (C(standin: true) in C(/server_info)) the module warns that its figures are a
    model and say nothing about GPUs, and returns RV(standin)=true."
"""

EXAMPLES = r"""
- name: Wait for the server and check it serves the verified commit with a working drafter
  gpufleet.llm.sglang_probe:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_api_key }}"
    expect_model_path: /srv/models/Kimi-K2.6/3f2a9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b
    min_accept_length: 2.5
    timeout: 3600
    unit: sglang-main.service
  register: probe

- name: Report
  ansible.builtin.debug:
    msg: "SGLang {{ probe.version }} serves {{ probe.model_path }}, accept length {{ probe.accept_sample.accept_length }}"

- name: Just wait for health, no generation
  gpufleet.llm.sglang_probe:
    url: http://10.0.4.11:30000
    smoke: false
    timeout: 600
    interval: 10
"""

RETURN = r"""
healthy:
  description: Whether C(/health) answered 200.
  returned: always
  type: bool
url:
  description: The base URL probed.
  returned: always
  type: str
  sample: http://127.0.0.1:30000
waited:
  description: Seconds until C(/health) answered 200.
  returned: success
  type: float
  sample: 412.5
polls:
  description: C(/health) requests made.
  returned: always
  type: int
model_path:
  description: C(model_path) from C(/model_info).
  returned: success
  type: str
  sample: /srv/models/Kimi-K2.6/3f2a9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b
served_model_name:
  description: C(served_model_name) from C(/model_info), when the server reports one.
  returned: success
  type: str
version:
  description: C(version) from C(/server_info).
  returned: success
  type: str
  sample: 0.5.23
standin:
  description: True when the server is the lab's SGLang stand-in, whose figures say nothing about GPUs.
  returned: always
  type: bool
speculative:
  description: Whether the server runs speculative decoding (a C(speculative_algorithm) or an accept length reported).
  returned: success
  type: bool
speculative_algorithm:
  description: C(speculative_algorithm) from C(/server_info), null when none.
  returned: success
  type: str
  sample: DFLASH
accept_length:
  description: "C(internal_states[0].avg_spec_accept_length) from C(/server_info) (read after the smoke request),
    reported, not judged (see RV(accept_sample)); read again after the sample when there is one (SGLang folds it
    only at decode-log intervals, so a fresh server has none before); null on a server without speculative decoding
    or before the first fold."
  returned: success
  type: float
  sample: 3.42
accept_sample:
  description: The accept-length sample (only with O(min_accept_length) above 0; null otherwise).
  returned: when the server was speculative and O(min_accept_length) above 0
  type: dict
  contains:
    requests:
      description: Requests sent.
      type: int
    reporting:
      description: Requests whose C(meta_info) reported C(spec_verify_ct).
      type: int
    max_new_tokens:
      description: C(max_new_tokens) of each request.
      type: int
    completion_tokens:
      description: Tokens generated by the reporting requests together.
      type: int
    spec_verify_ct:
      description: Their verify steps together.
      type: int
    accept_length:
      description: C(completion_tokens / spec_verify_ct), the figure judged.
      type: float
    ci95:
      description: The 95% interval of the pooled accept length (ratio estimator over the requests), null with
        fewer than 2 reporting requests.
      type: list
      elements: float
    per_request:
      description: Each reporting request's own accept length.
      type: list
      elements: float
    min_tokens:
      description: O(accept_min_tokens).
      type: int
    judged:
      description: Whether the sample was big enough to be judged against O(min_accept_length).
      type: bool
    request:
      description:
        - What every request of the sample sent, read from the body the benchmark's client built - C(api)
          (V(chat) or V(generate)), C(path), C(chat_template) (whether the server applied the model's chat template),
          C(temperature), C(ignore_eos), C(stream), C(max_new_tokens) - and C(reason), why this API.
      type: dict
  sample: {"requests": 8, "reporting": 8, "max_new_tokens": 256, "completion_tokens": 2048, "spec_verify_ct": 602,
           "accept_length": 3.402, "ci95": [3.18, 3.62], "per_request": [3.41, 2.98, 3.66, 3.2, 3.5, 3.3, 3.9, 3.3],
           "min_tokens": 1024, "judged": true,
           "request": {"api": "chat", "path": "/v1/chat/completions", "chat_template": true, "temperature": 1.0,
                       "ignore_eos": true, "stream": true, "max_new_tokens": 256,
                       "reason": "chat model: /srv/models/Kimi-K2.6/3f2a/chat_template.jinja exists"}}
unit:
  description: O(unit), when given.
  returned: always
  type: str
unit_failed:
  description: True when the probe stopped because the unit failed, crashed or restarted during the wait.
  returned: always
  type: bool
smoke:
  description: The smoke generation; null when O(smoke=false).
  returned: success
  type: dict
  contains:
    completion_tokens:
      description: Tokens generated.
      type: int
    spec_verify_ct:
      description: Verify steps (speculative servers only).
      type: int
    accept_length:
      description: C(completion_tokens / spec_verify_ct), null without speculative decoding.
      type: float
    latency:
      description: Seconds the request took, as seen by the module.
      type: float
    finish_reason:
      description: C(meta_info.finish_reason).
      type: dict
  sample: {"completion_tokens": 16, "spec_verify_ct": 5, "accept_length": 3.2, "latency": 0.41,
           "finish_reason": {"type": "length", "length": 16}}
min_accept_length:
  description: The minimum checked (0 = not checked).
  returned: always
  type: float
checks:
  description: One line per check passed, with its numbers.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import probe as _sglang_probe
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure


def _runner(module: AnsibleModule):
    def run_command(argv: list) -> tuple:
        # LC_ALL=C: the journal and systemctl messages are quoted to the operator as they are.
        return module.run_command(argv, environ_update={"LC_ALL": "C", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"})
    return run_command


def main() -> None:
    module = AnsibleModule(argument_spec=_sglang_probe.argument_spec(), supports_check_mode=True)
    if module.params["unit"]:
        for tool in ("systemctl", "journalctl"):
            if not module.get_bin_path(tool):
                module.fail_json(msg="unit %s is given but %s is not on this host: watching a unit needs systemd; "
                                     "omit unit to wait for /health only" % (module.params["unit"], tool))
    # A password in the URL is refused by the probe; it must not be echoed back in the invocation either.
    password = _sglang_probe.url_password(module.params["url"])
    if password:
        module.no_log_values.add(password)
    try:
        result = _sglang_probe.run(module.params, warn=module.warn, run_command=_runner(module))
    except ModuleFailure as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
