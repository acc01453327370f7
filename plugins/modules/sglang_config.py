#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_config
short_description: Write an SGLang server config YAML in SGLang's dash form, with secrets masked in every diff
version_added: 0.1.0
description:
  - "Renders O(options) and O(secrets) to the YAML file that C(python -m sglang.launch_server --config FILE) reads.
    Keys are accepted with underscores or dashes and written in SGLang's dash form (SGLang 0.5.23 passes a key
    on as C(--<key>), so C(tp_size) would be rejected); the same option given in two spellings is an error."
  - "Values are written as JSON flow values, keys sorted: the same options always give the same bytes, so a
    change means the server would start differently. An option whose value is C(null) is left out (it unsets
    a default)."
  - The file is replaced atomically (readers see the old or the new file) and gets its mode and owner before any
    byte is written. With O(previous), the file being replaced is kept there first, for a rollback.
  - "The diff shows secret values (O(secrets) and any option whose name looks like one: C(api-key),
    C(*-password), C(*-token)) as C(********), before and after."
  - Does not validate option names against SGLang; that is gpufleet.llm.sglang_preflight's job.
  - "With O(format=env) the file is the unit's C(EnvironmentFile): one C(NAME=\"value\") line per variable (names as
    given, sorted; backslash and double quote escaped), and secret-looking names (C(HF_TOKEN), C(*_API_KEY),
    C(*_PASSWORD), C(*_SECRET*)) are masked in the diff and kept out of every output, as O(secrets) are."
  - "In check mode, a missing directory of O(path) or a missing O(owner) or O(group) is not an error: on a host that
    never ran the C(sglang) role the tasks before would have created them; the diff shows the whole new file."
author:
  - gpufleet.llm maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.llm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: Secret values are masked in the diff.
  idempotent:
    support: full
options:
  path:
    description:
      - The file. A config (O(format=yaml)) must end in C(.yaml) or C(.yml), as SGLang requires. Its directory must
        exist (except in check mode).
    type: path
    required: true
  options:
    description: "SGLang server options, option name -> value (for example C(tp-size: 8), C(trust_remote_code: true))."
    type: dict
    default: {}
  secrets:
    description: Secret options (for example C(api-key)), written like O(options) but never shown.
    type: dict
    default: {}
  owner:
    description: Owner of the file (name or uid). Default the current user.
    type: str
  group:
    description: Group of the file (name or gid), typically the service user's group so the server can read it.
    type: str
  mode:
    description: Mode of the file; C(0640) keeps secrets from other users.
    type: raw
    default: "0640"
  previous:
    description: Where to keep the file being replaced (mode and owner kept), for a rollback. Empty keeps nothing.
    type: path
  format:
    description:
      - V(yaml) writes SGLang's C(--config) file (dash-form option names, JSON flow values).
      - V(env) writes a systemd C(EnvironmentFile) from O(options) and O(secrets) as environment variables.
    type: str
    choices: [yaml, env]
    default: yaml
seealso:
  - module: gpufleet.llm.sglang_preflight
  - name: sglang role
    description: Renders, validates and applies the config behind a verification gate.
    link: https://github.com/gpufleet/gpufleet.llm/blob/main/docs/sglang_role.md
"""

EXAMPLES = r"""
- name: Write the server config (the API key comes from a vault)
  gpufleet.llm.sglang_config:
    path: /etc/sglang/kimi.yaml
    options:
      model_path: /srv/models/kimi-k2.6/0123456789abcdef0123456789abcdef01234567
      speculative-algorithm: DFLASH
      tp-size: 8
    secrets:
      api-key: "{{ vault_sglang_api_key }}"
    group: sglang
    mode: "0640"
    previous: /etc/sglang/kimi.yaml.previous

- name: Write the server's environment file (HF_TOKEN masked in the diff)
  gpufleet.llm.sglang_config:
    path: /etc/sglang/kimi.env
    format: env
    options:
      NCCL_DEBUG: WARN
      HF_TOKEN: "{{ vault_hf_token }}"
    group: sglang
    mode: "0640"
    previous: /etc/sglang/kimi.env.previous
"""

RETURN = r"""
path:
  description: The config file.
  returned: always
  type: str
options:
  description: The options (or environment variables) as written, in dash form for a config, secrets masked.
  returned: always
  type: dict
  sample: {"api-key": "********", "model-path": "/srv/models/kimi/0123abcd", "tp-size": 8}
previous:
  description: Where the replaced file was kept, when it was.
  returned: when a file was replaced and O(previous) is set
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import config as _sglang_config
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure


def main() -> None:
    # no_log: Ansible logs a module's arguments to the host's journal before the module runs, and the
    # options may hold an environment's HF_TOKEN (the secret-looking values are masked only from here on).
    module = AnsibleModule(argument_spec=_sglang_config.argument_spec(), supports_check_mode=True, no_log=True)
    # A secret-looking name given in options (HF_TOKEN in an environment) is kept out of the invocation
    # and every other output, as the secrets option is.
    module.no_log_values.update(_sglang_config.secret_option_values(module.params))
    try:
        result = _sglang_config.run(module.params, check_mode=module.check_mode)
    except ModuleFailure as exc:
        module.fail_json(**exc.fail_kwargs())
    if not result["changed"]:
        # Same bytes: only the file's mode and owner may need setting, which is Ansible's own job.
        p = module.params
        file_args = module.load_file_common_arguments(dict(path=p["path"], owner=p["owner"], group=p["group"], mode=p["mode"]))
        result["changed"] = module.set_fs_attributes_if_different(file_args, False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
