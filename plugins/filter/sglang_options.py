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
    C(speculative-algorithm), C(nnodes), C(node-rank), C(dist-init-addr), C(api-key), C(config)); the
    message names the role variable to use instead. Values never appear in a message.
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

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang_config import KEY_SHAPE

# Read from SGLang 0.5.23's ServerArgs.add_cli_args (sglang/srt/server_args.py and the field
# declarations of sglang/srt/arg_groups/fields/): every option registered with two or more long
# option strings, alias -> the option string named after its dest. BooleanOptionalAction's --no-*
# negations are no aliases (and SGLang's config merger refuses them anyway).
# tests/unit/plugins/filter/test_sglang_options_sglang.py compares this with the real parser.
ALIASES_SGLANG_VERSION = "0.5.23"
ALIASES = {
    "attention-context-parallel-size": "attn-cp-size",
    "attention-data-parallel-size": "attn-dp-size",
    "context-bucket": "cuda-graph-prefill-max-context",
    "data-parallel-size": "dp-size",
    "decode-context-parallel-size": "dcp-size",
    "enable-hicache": "enable-hierarchical-cache",
    "ep": "ep-size",
    "expert-parallel-size": "ep-size",
    "grpc-http-sidecar-port": "smg-http-sidecar-port",
    "hierarchical-sparse-attention-extra-config": "hisparse-config",
    "model": "model-path",
    "moe-data-parallel-size": "moe-dp-size",
    "nccl-init-addr": "dist-init-addr",
    "pipeline-parallel-size": "pp-size",
    "speculative-draft-model": "speculative-draft-model-path",
    "tensor-parallel-size": "tp-size",
}

# What the role sets itself (after the gate verified it), and what to set instead.
ROLE_OWNED = {
    "model-path": "sglang_target_model (a model_models name) or sglang_target_path: the gate verifies that model",
    "speculative-draft-model-path": "sglang_drafter_model (a model_models name) or sglang_drafter_path: the gate verifies that drafter",
    "speculative-algorithm": "sglang_drafter_model or sglang_drafter_path: the role sets DFLASH when a drafter is given",
    "nnodes": "sglang_multinode_group: the role counts its hosts",
    "node-rank": "sglang_multinode_group: the role ranks its sorted hosts",
    "dist-init-addr": "sglang_multinode_group and sglang_dist_init_port: the role uses the group's first host",
    "api-key": "sglang_api_key (written only into the config file, kept out of logs and diffs)",
    "config": "sglang_args for the options themselves: the role starts SGLang with --config <its own file>",
}

# Argparse (allow_abbrev, as SGLang builds its parser) reads a unique prefix as the whole option;
# no other 0.5.23 option is a prefix of one of these (the test checks), so a prefix is never meant
# as something else.
_GUARDED = frozenset(ALIASES) | frozenset(ALIASES.values()) | frozenset(ROLE_OWNED)


def _canonical(raw: Any, *, source: str) -> str:
    key = str(raw).strip().lstrip("-").replace("_", "-").lower()
    if not KEY_SHAPE.match(key):
        raise AnsibleFilterError("%s: %r is not an SGLang option name (a long option without the leading dashes, "
                                 "for example tp-size)" % (source, raw))
    canonical = ALIASES.get(key, key)
    if canonical not in _GUARDED:
        prefixed = sorted(set(ALIASES.get(name, name) for name in _GUARDED if name.startswith(key)))
        if prefixed:
            raise AnsibleFilterError("%s: %r is only the start of %s; SGLang's parser would read it as that option "
                                     "(or refuse it as ambiguous): write the full name" % (source, raw, " / ".join(prefixed)))
    return canonical


def _owned_error(raw: Any, key: str, *, source: str) -> AnsibleFilterError:
    # Named only for an alias: model_path needs no "(SGLang's model-path)", model does.
    spelt = "" if str(raw).strip().lstrip("-").replace("_", "-").lower() == key else " (SGLang's %s)" % key
    return AnsibleFilterError("%s: %r%s is set by the sglang role and cannot be given here; use %s"
                              % (source, raw, spelt, ROLE_OWNED[key]))


def _normalise(data: Any, *, source: str) -> dict:
    """One variable's options -> {canonical dash key: value}, None kept (it removes an option)."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise AnsibleFilterError("%s must be a dict of SGLang option -> value, got %s" % (source, type(data).__name__))
    out = {}
    origin = {}
    for raw, value in data.items():
        key = _canonical(raw, source=source)
        if key in ROLE_OWNED:
            raise _owned_error(raw, key, source=source)
        if key in origin:
            raise AnsibleFilterError("%s: %r and %r are two spellings of SGLang's %s: keep one"
                                     % (source, origin[key], raw, key))
        origin[key] = raw
        out[key] = value
    return out


def sglang_options(base_args: Any, args: Any = None, role_options: Any = None) -> dict:
    merged = _normalise(base_args, source="sglang_base_args")
    merged.update(_normalise(args, source="sglang_args"))
    if role_options is not None and not isinstance(role_options, dict):
        raise AnsibleFilterError("sglang_options: role_options must be a dict, got %s" % type(role_options).__name__)
    for key, value in (role_options or {}).items():
        merged[str(key)] = value
    return dict((key, value) for key, value in merged.items() if value is not None)


class FilterModule(object):
    def filters(self):
        return {"sglang_options": sglang_options}
