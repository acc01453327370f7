#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_preflight
short_description: Validate an SGLang server config YAML with the host's own SGLang argument parser
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
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.llm.plugins.module_utils import _sglang_check
from ansible_collections.gpufleet.llm.plugins.module_utils._failure import ModuleFailure


def main() -> None:
    module = AnsibleModule(argument_spec=_sglang_check.argument_spec(), supports_check_mode=True)
    try:
        result = _sglang_check.run(module.params, run_command=module.run_command, warn=module.warn)
    except ModuleFailure as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
