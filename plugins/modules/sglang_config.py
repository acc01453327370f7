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
    description: The config file; must end in C(.yaml) or C(.yml), as SGLang requires. Its directory must exist.
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
"""

RETURN = r"""
path:
  description: The config file.
  returned: always
  type: str
options:
  description: The options as written, in dash form, secrets masked.
  returned: always
  type: dict
  sample: {"api-key": "********", "model-path": "/srv/models/kimi/0123abcd", "tp-size": 8}
previous:
  description: Where the replaced file was kept, when it was.
  returned: when a file was replaced and O(previous) is set
  type: str
"""

import grp
import os
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.llm.plugins.module_utils import _sglang_config


def _ids(module, owner, group):
    uid = gid = -1
    try:
        if owner:
            uid = int(owner) if owner.isdigit() else pwd.getpwnam(owner).pw_uid
        if group:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        module.fail_json(msg="owner %r or group %r does not exist on this host: create the service user first" % (owner, group))
    return uid, gid


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            options=dict(type="dict", default={}),
            secrets=dict(type="dict", default={}, no_log=True),
            owner=dict(type="str"),
            group=dict(type="str"),
            mode=dict(type="raw", default="0640"),
            previous=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    if not path.endswith((".yaml", ".yml")):
        module.fail_json(msg="path %s must end in .yaml or .yml: SGLang reads --config files by suffix" % path)
    if not os.path.isdir(os.path.dirname(path) or "."):
        module.fail_json(msg="the directory of %s does not exist: create it first" % path)
    try:
        mode = int(str(p["mode"]), 8) if not isinstance(p["mode"], int) else p["mode"]
    except ValueError:
        module.fail_json(msg="mode must be octal like 0640, got %r" % p["mode"])
    secret_values = [str(v) for v in (p["secrets"] or {}).values() if v not in (None, "")]
    try:
        options = _sglang_config.normalise(p["options"], p["secrets"])
        text = _sglang_config.render(options)
        before = _sglang_config.read_text(path)
    except _sglang_config.ConfigError as exc:
        module.fail_json(msg=str(exc))
    uid, gid = _ids(module, p["owner"], p["group"])

    result = dict(changed=False, path=path, options=_sglang_config.masked_options(options))
    content_changed = before != text
    if content_changed:
        result["changed"] = True
        result["diff"] = dict(
            before_header=path, after_header=path,
            before=_sglang_config.mask_text(before or "", secret_values),
            after=_sglang_config.mask_text(text, secret_values))
        if not module.check_mode:
            try:
                if before is not None and p["previous"]:
                    _sglang_config.keep_previous(path, p["previous"])
                    result["previous"] = p["previous"]
                _sglang_config.write_atomic(path, text, mode, uid, gid)
            except (IOError, OSError) as exc:
                module.fail_json(msg="cannot write %s: %s" % (path, exc), **result)
    else:
        # Same bytes: only the file's attributes may need setting.
        file_args = module.load_file_common_arguments(dict(path=path, owner=p["owner"], group=p["group"], mode=p["mode"]))
        result["changed"] = module.set_fs_attributes_if_different(file_args, False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
