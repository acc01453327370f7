#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_preflight
short_description: Validate an SGLang server config YAML with the host's own SGLang parser and start-time rules
version_added: 0.1.0
description:
  - "Runs a small checker with O(python), the interpreter SGLang is installed in (Ansible's own interpreter need
    not have SGLang). The checker builds SGLang's server argument parser
    (C(sglang.srt.server_args.ServerArgs.add_cli_args)), reads and merges O(config) with that version's own
    C(ConfigArgumentMerger) the way C(python -m sglang.launch_server --config FILE) does, and parses the result."
  - "It reports every problem by option name, not only the first: an unknown (for example misspelt) option, with
    the closest real name; an underscore key such as C(model_path), which SGLang 0.5.23 passes on as
    C(--model_path) and rejects (the fix is the dash form C(model-path)); an invalid choice or value; a key the
    merger does not support; an empty (null) value; a missing required option; and a C(speculative-algorithm)
    that SGLang's C(SpeculativeAlgorithm) does not know (the parser alone accepts any string, so
    C(DFLASHX) parses)."
  - "A key accepted only as an abbreviation of a longer option (argparse prefix matching, for example C(tp) for
    C(tp-size)) is a warning."
  - "When the parser accepts the config, the same run of O(python) (SGLang is imported once for both) goes on
    to judge part of what SGLang 0.5.23 refuses only at START, with SGLang's own code, in the environment of
    O(environment). It runs SGLang's whole speculative-decoding step,
    C(handle_speculative_decoding) of C(sglang/srt/arg_groups/speculative_hook.py), through which DFLASH reaches
    C(_handle_dflash) (rules V(spec-draft-sink), V(spec-draft-window), V(spec-dp-prefill-coordination),
    V(spec-block-verification), V(dflash-device), V(dflash-dp-attention), V(dflash-pp-size), V(dflash-draft-path),
    V(dflash-block-size), V(dflash-draft-window)); C(parse_dflash_draft_config) on the drafter's C(config.json)
    (V(dflash-draft-config)); and the context length with C(json-model-override-args) applied to the target's and
    the drafter's config as SGLang applies it (V(context-length), V(draft-context-length)), refused unless
    C(SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN) is true in O(environment)."
  - "It does not run the rest of SGLang's start (the other steps of its hook pipeline, the model and tokenizer
    load). Each refusal names the rule, the option(s) and the fix. What is stood in (the device, evaluated as cuda;
    transformers' C(get_config) and the GPU kernels of C(dflash_utils) where they cannot be imported) and the DFLASH
    rules it cannot evaluate on this host (NVFP4 KV on SM100, unified memory, CP/TP group sharing, LoRA, the draft
    worker's mask token id against the vocabulary and tokenizer, the target's attention backend) are named
    notices; warnings SGLang logs (such as a draft attention backend it falls back from) are notices too.
    A rule that needs a model directory or C(transformers) this host lacks is listed in RV(start.skipped)."
  - Nothing is started and no GPU is needed. Option names are never assumed; they come from the installed SGLang.
  - Never reports a change.
author:
  - gpufleet.llm maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.llm.attributes
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same check in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  config:
    description:
      - "Path of the staged config YAML on the host, with the options in SGLang's dash form
        (C(speculative-algorithm: DFLASH))."
      - The suffix rule is the installed SGLang's (0.5.23 accepts C(.yaml) and C(.yml)); the C(sglang) role stages
        C(.yaml).
    type: path
    required: true
  python:
    description: The Python interpreter that has SGLang, the one the server runs with.
    type: path
    default: /usr/bin/python3
  expect_version:
    description: Fail unless the SGLang that O(python) imports has exactly this C(__version__), for example V(0.5.23).
    type: str
  environment:
    description:
      - "The server unit's environment (the C(sglang) role passes C(sglang_environment)), applied to both checks:
        SGLang reads some start-time switches from it, C(SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN) among them.
        The run drops every other C(SGLANG_*) variable it inherits (the SSH session's) before SGLang is imported,
        as the unit has only its C(EnvironmentFile)."
      - "Names and values as the unit's C(EnvironmentFile) takes them: a null value drops the variable; a list,
        a dict, a line break or a name that is not a variable name fails, naming it."
      - "Values never appear in the output: the invocation shows the names only, and the values of secret-looking
        names (C(HF_TOKEN), C(*_API_KEY), C(*PASSWORD*)) are masked wherever they would appear. The option is not
        C(no_log) as a whole because Ansible would then mask every occurrence of short values such as V(1) in the
        whole result (version numbers, SGLang's messages)."
    type: dict
    default: {}
seealso:
  - name: sglang_preflight documentation
    description: What is checked, how, and the messages.
    link: https://github.com/gpufleet/gpufleet.llm/blob/main/docs/sglang_preflight.md
notes:
  - Needs only the Python standard library in Ansible's interpreter. O(python) needs SGLang and its import-time
    dependencies (PyYAML among them); a CPU-only install is enough (see C(requirements/sglang-host.txt)).
  - Values of secret options (C(api-key), C(admin-api-key), C(ssl-keyfile-password)) are masked in RV(options) and
    in every message.
"""

EXAMPLES = r"""
- name: Validate the staged config before anything in /etc is written
  gpufleet.llm.sglang_preflight:
    config: /var/lib/sglang/staging/kimi.yaml
    python: /opt/sglang/0.5.23/bin/python
    expect_version: 0.5.23
  register: preflight

- name: Validate it in the unit's environment (DFlash drafter shorter than the context length)
  gpufleet.llm.sglang_preflight:
    config: /var/lib/sglang/staging/kimi.yaml
    python: /opt/sglang/0.5.23/bin/python
    environment:
      SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: "1"
      NCCL_DEBUG: WARN

- name: Show what SGLang will run with
  ansible.builtin.debug:
    var: preflight.options
"""

RETURN = r"""
ok:
  description: True when SGLang accepts the config.
  returned: always
  type: bool
version:
  description: The C(sglang.__version__) O(python) imports.
  returned: when SGLang imports
  type: str
  sample: 0.5.23
python:
  description: The interpreter that ran the check.
  returned: always
  type: str
config:
  description: The config that was checked.
  returned: always
  type: str
options:
  description:
    - The options the file sets, as SGLang parsed them (types applied), keyed by dash name. Secret values are
      masked.
  returned: when SGLang imports
  type: dict
  sample: {"model-path": "/srv/models/Kimi-K2.6/3f2a", "speculative-algorithm": "DFLASH", "tp-size": 8,
           "trust-remote-code": true, "api-key": "********"}
problems:
  description: One line per problem, naming the key and the fix.
  returned: always
  type: list
  elements: str
  sample: ["model_path: underscore key: SGLang 0.5.23 passes it on as --model_path, which its parser rejects;
            write it as 'model-path'"]
sglang_path:
  description: Where the imported SGLang package lives.
  returned: when SGLang imports
  type: str
notices:
  description: Findings that do not fail (also shown as warnings).
  returned: always
  type: list
  elements: str
environment:
  description: The names (never the values) of the O(environment) variables both checks ran with.
  returned: when the parser accepts the config
  type: list
  elements: str
  sample: ["NCCL_DEBUG", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"]
start:
  description: The start-time check, run when the parser accepts the config.
  returned: when the parser accepts the config
  type: dict
  contains:
    path:
      description:
        - V(handle_speculative_decoding) when SGLang's speculative-decoding step ran; V(_handle_dflash) when it could
          not run on this host and only the DFLASH rules were evaluated, null when it could not run for another algorithm
          (a notice says why in both cases).
      type: str
      sample: handle_speculative_decoding
    notices:
      description: What was stood in, what SGLang warned and which rules were not evaluated, each starting with its
        name (also in RV(notices)).
      type: list
      elements: str
      sample: ["device-stand-in: device is unset and resolved from the GPU at start; evaluated as cuda ...",
               "not-evaluated: dflash-lora (lora_hook: ...)"]
    checked:
      description: The rules SGLang's code was run for and passed (or refused, then named in RV(problems)).
      type: list
      elements: str
      sample: ["dflash-draft-config", "speculative-decoding", "spec-draft-sink", "dflash-pp-size",
               "dflash-draft-path", "dflash-block-size", "dflash-draft-window", "context-length", "draft-context-length"]
    skipped:
      description: Rules that could not be checked on this host, each with the reason.
      type: list
      elements: str
    resolved:
      description:
        - What SGLang resolved on the way, for example C(max-running-requests) (DFlash sets 48 when unset),
          C(speculative-num-draft-tokens), and for the context rules the wanted and the model's length.
      type: dict
      sample: {"max-running-requests": 48, "speculative-num-draft-tokens": 16,
               "draft-context-length": {"wanted": 131072, "model": 262144}}
    error:
      description: Why the start-time check could not run (also a notice), or null.
      type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import check as _sglang_check
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import start_check as _sglang_start_check
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.module_utils._common.secrets import MASK


def main() -> None:
    # no_log=True only keeps the invocation out of the host's journal: environment values must not
    # land there. The result is not affected.
    module = AnsibleModule(argument_spec=_sglang_check.argument_spec(), supports_check_mode=True, no_log=True)
    raw = module.params["environment"] or {}
    # The invocation Ansible would echo holds the environment's values: names only.
    invocation = dict(module_args=dict(module.params, environment=dict((str(k), MASK) for k in raw)))
    named = dict((str(k), str(v)) for k, v in raw.items() if v is not None)
    module.no_log_values.update(_sglang_start_check.secret_values(named))
    try:
        result = _sglang_start_check.run(module.params, run_command=module.run_command, warn=module.warn)
    except ModuleFailure as exc:
        module.fail_json(invocation=invocation, **exc.fail_kwargs())
    module.exit_json(invocation=invocation, **result)


if __name__ == "__main__":
    main()
