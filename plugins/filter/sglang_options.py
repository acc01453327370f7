# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_options
short_description: Merge the sglang role's server options, refusing what the role owns
version_added: 0.1.0
author: gpufleet.llm contributors
description:
  - Returns the SGLang server options the sglang role writes to its config file, in dash form
    (C(tp_size) and C(tp-size) both become C(tp-size)), from the input (O(_input), the role's
    C(sglang_base_args)), O(args) (C(sglang_args), merged over it) and O(role_options) (what the role
    itself sets, C(model-path), the drafter's C(speculative-*), the multi-node ranks).
  - "Aliases of SGLang 0.5.23's parser are resolved to the option's own name: C(tensor-parallel-size)
    becomes C(tp-size), C(model) becomes C(model-path), and so on, so that the merged
    C(tp-size) is the tensor-parallel size the server really gets."
  - "A C(null) value removes an option of O(_input)."
  - Fails when one dict gives one option twice (two spellings, or an alias and its name), when a key
    is only a prefix of an option the role checks (SGLang's parser would read it as that option), and
    when O(_input) or O(args) sets an option the role owns (C(model-path), C(speculative-draft-model-path),
    C(speculative-algorithm), C(nnodes), C(node-rank), C(dist-init-addr), C(api-key), C(admin-api-key), C(config),
    C(json-model-override-args), C(tokenizer-path)); the message names the role variable to use instead.
    Values of O(_input) and O(args) never appear in a message.
  - "Fails on what would swap the weights after the gate verified them: C(load-format) and
    C(speculative-draft-load-format) other than C(auto), C(safetensors), C(fastsafetensors), C(instanttensor) (the
    formats that read the model directory's safetensors; C(dummy) loads random weights), and C(decrypted-config-file)
    and C(decrypted-draft-config-file) (they replace the verified config.json)."
  - "O(model_override_args) becomes C(json-model-override-args) only when its keys are C(max_position_embeddings),
    C(rope_parameters), C(rope_scaling), C(rope_theta) (or these under C(text_config)), with values of their type.
    O(tokenizer_path) becomes C(tokenizer-path) only when, normalised (relative to O(model_dir)), it is O(model_dir)
    or a directory inside it: a path check, the files in it are not read."
options:
  _input:
    description: The base options (the role's C(sglang_base_args)).
    type: dict
    required: true
  args:
    description: The user's options (the role's C(sglang_args)), merged over O(_input).
    type: dict
    default: {}
  role_options:
    description: Options the role sets itself, dash form, applied last.
    type: dict
    default: {}
  model_override_args:
    description: The role's C(sglang_model_override_args), checked and written as C(json-model-override-args) (JSON text).
    type: dict
    default: {}
  tokenizer_path:
    description: The role's C(sglang_tokenizer_path), checked against O(model_dir) and written as C(tokenizer-path).
    type: str
    default: ""
  model_dir:
    description: The target's verified commit directory (the C(model-path) the role sets); needed with O(tokenizer_path).
    type: str
"""

EXAMPLES = r"""
- name: Merge the options of an instance
  ansible.builtin.set_fact:
    # {'host': '127.0.0.1', 'tp-size': 16, 'model-path': '/srv/models/m/abc'}
    options: "{{ {'host': '127.0.0.1', 'tp-size': 8} | gpufleet.llm.sglang_options({'tensor_parallel_size': 16},
                                                                                 {'model-path': '/srv/models/m/abc'}) }}"
"""

RETURN = r"""
_value:
  description: The merged options, dash-form keys, options with a C(null) value left out.
  type: dict
"""

from typing import Any

from ansible.errors import AnsibleFilterError

# The tables are the module_utils' own (tests and docs read them here too).
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang.options import (  # noqa: F401 pylint: disable=unused-import
    ALIASES, ALIASES_SGLANG_VERSION, LOAD_FORMAT_OPTIONS, OVERRIDE_KEYS, REFUSED, ROLE_OWNED, VERIFIED_LOAD_FORMATS, OptionsError)
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import options as _options


def sglang_options(base_args: Any, args: Any = None, role_options: Any = None, *, model_override_args: Any = None,
                   tokenizer_path: Any = None, model_dir: Any = None) -> dict:
    try:
        return _options.sglang_options(base_args, args, role_options, model_override_args=model_override_args,
                                       tokenizer_path=tokenizer_path, model_dir=model_dir)
    except OptionsError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule(object):
    def filters(self):
        return {"sglang_options": sglang_options}
