# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The server options the sglang role writes (gpufleet.llm.sglang_options): the role's own keys refused in
sglang_base_args / sglang_args, SGLang's aliases resolved, one spelling per option, the options that would
load other weights than the gate verified refused, the checked override and tokenizer options.

Private to the collection: not a public API, may change without notice. Standard library only.
"""
from __future__ import annotations

import json
import posixpath
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang.config import KEY_SHAPE


class OptionsError(ValueError):
    """Options the role refuses; the message is the filter's error, word for word."""


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

# json-model-override-args keys the role accepts (sglang_model_override_args): they set the context length and
# the rotary embedding (SGLang applies them to the target's and the drafter's config, utils/hf_transformers/config.py),
# never which weights or architecture are loaded. text_config holds the same keys for a multimodal model.
OVERRIDE_KEYS = ("max_position_embeddings", "rope_parameters", "rope_scaling", "rope_theta")
OVERRIDE_NESTED = "text_config"

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
    "admin-api-key": "sglang_admin_api_key (written only into the config file, kept out of logs and diffs; "
                     "the benchmark's /flush_cache sends it)",
    "json-model-override-args": "sglang_model_override_args (a dict the role checks: only the context/rope keys %s, "
                                "at the top level or under %s)" % (", ".join(OVERRIDE_KEYS), OVERRIDE_NESTED),
    "tokenizer-path": "sglang_tokenizer_path (checked to be the target's verified commit directory or a directory inside it)",
}

# Options that change what is loaded after the gate verified it, with no role variable: refused outright.
REFUSED = {
    "decrypted-config-file": "it replaces the target's config.json, which the gate verified, with another file",
    "decrypted-draft-config-file": "it replaces the drafter's config.json, which the gate verified, with another file",
}

# SGLang 0.5.23's --load-format choices (sglang/srt/arg_groups/choices.py LOAD_FORMAT_CHOICES) that read the
# verified safetensors of the model directory (DefaultModelLoader._prepare_weights: *.safetensors; auto also
# *.bin when there is no safetensors file). Every other choice loads something else: dummy random weights, pt/npcache
# *.pt/*.bin, gguf, sharded_state/presharded/expert_pack their own files, remote/remote_instance/rdma/private/
# runai_streamer another source, layered/flash_rl/bitsandbytes/mistral other loaders or files.
VERIFIED_LOAD_FORMATS = ("auto", "safetensors", "fastsafetensors", "instanttensor")
LOAD_FORMAT_OPTIONS = ("load-format", "speculative-draft-load-format")


# Argparse (allow_abbrev, as SGLang builds its parser) reads a unique prefix as the whole option;
# no other 0.5.23 option is a prefix of one of these (the test checks), so a prefix is never meant
# as something else.
_GUARDED = (frozenset(ALIASES) | frozenset(ALIASES.values()) | frozenset(ROLE_OWNED) | frozenset(REFUSED)
            | frozenset(LOAD_FORMAT_OPTIONS))


def _canonical(raw: Any, *, source: str) -> str:
    key = str(raw).strip().lstrip("-").replace("_", "-").lower()
    if not KEY_SHAPE.match(key):
        raise OptionsError("%s: %r is not an SGLang option name (a long option without the leading dashes, "
                           "for example tp-size)" % (source, raw))
    canonical = ALIASES.get(key, key)
    if canonical not in _GUARDED:
        prefixed = sorted(set(ALIASES.get(name, name) for name in _GUARDED if name.startswith(key)))
        if prefixed:
            raise OptionsError("%s: %r is only the start of %s; SGLang's parser would read it as that option "
                               "(or refuse it as ambiguous): write the full name" % (source, raw, " / ".join(prefixed)))
    return canonical


def _owned_error(raw: Any, key: str, *, source: str) -> OptionsError:
    # Named only for an alias: model_path needs no "(SGLang's model-path)", model does.
    spelt = "" if str(raw).strip().lstrip("-").replace("_", "-").lower() == key else " (SGLang's %s)" % key
    return OptionsError("%s: %r%s is set by the sglang role and cannot be given here; use %s"
                        % (source, raw, spelt, ROLE_OWNED[key]))


def _normalise(data: Any, *, source: str) -> dict:
    """One variable's options -> {canonical dash key: value}, None kept (it removes an option)."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise OptionsError("%s must be a dict of SGLang option -> value, got %s" % (source, type(data).__name__))
    out = {}
    origin = {}
    for raw, value in data.items():
        key = _canonical(raw, source=source)
        if key in ROLE_OWNED:
            raise _owned_error(raw, key, source=source)
        if key in REFUSED:
            raise OptionsError("%s: %r is refused: %s; serve a model whose files the gate verifies as they are"
                               % (source, raw, REFUSED[key]))
        if key in LOAD_FORMAT_OPTIONS and value is not None and value not in VERIFIED_LOAD_FORMATS:
            raise OptionsError("%s: %r must be one of %s (the formats that load the verified safetensors), or "
                               "null: other formats load other weights (dummy: random ones) than the gate verified"
                               % (source, raw, ", ".join(VERIFIED_LOAD_FORMATS)))
        if key in origin:
            raise OptionsError("%s: %r and %r are two spellings of SGLang's %s: keep one"
                               % (source, origin[key], raw, key))
        origin[key] = raw
        out[key] = value
    return out


def _override_value(key: str, value: Any, where: str) -> None:
    if key == "max_position_embeddings":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise OptionsError("%s.%s must be a positive integer" % (where, key))
    elif key == "rope_theta":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise OptionsError("%s.%s must be a positive number" % (where, key))
    elif value is not None:
        # rope_scaling / rope_parameters: a dict of scalars (rope_type, factor, ...) or lists of numbers (longrope)
        if not isinstance(value, dict):
            raise OptionsError("%s.%s must be a dict (for example {rope_type: yarn, factor: 4.0}) or null"
                               % (where, key))
        for name, item in value.items():
            items = item if isinstance(item, list) else [item]
            if not isinstance(name, str) or not all(x is None or isinstance(x, (str, int, float, bool)) for x in items):
                raise OptionsError("%s.%s: %r must map names to numbers, strings or lists of numbers"
                                   % (where, key, name))


def model_override_json(overrides: Any) -> str | None:
    """sglang_model_override_args -> the json-model-override-args text, or None when empty.

    Only OVERRIDE_KEYS, at the top level or under OVERRIDE_NESTED: context length and rotary embedding.
    Anything else (architectures, num_hidden_layers, quantization_config, vocab_size, ...) changes
    which weights are loaded or how, after the gate verified the config that names them.
    """
    where = "sglang_model_override_args"
    if overrides is None or overrides == {}:
        return None
    if not isinstance(overrides, dict):
        raise OptionsError("%s must be a dict of config.json key -> value, got %s" % (where, type(overrides).__name__))
    for key, value in overrides.items():
        if key == OVERRIDE_NESTED:
            if not isinstance(value, dict) or not value:
                raise OptionsError("%s.%s must be a non-empty dict of %s" % (where, key, ", ".join(OVERRIDE_KEYS)))
            for inner, item in value.items():
                if inner not in OVERRIDE_KEYS:
                    raise OptionsError("%s.%s: %r cannot be overridden; only %s can (context length and rotary "
                                       "embedding), other keys change what is loaded after the gate verified it"
                                       % (where, key, inner, ", ".join(OVERRIDE_KEYS)))
                _override_value(inner, item, "%s.%s" % (where, key))
        elif key in OVERRIDE_KEYS:
            _override_value(key, value, where)
        else:
            raise OptionsError("%s: %r cannot be overridden; only %s (or the same under %s) can (context length "
                               "and rotary embedding), other keys change what is loaded after the gate verified it"
                               % (where, key, ", ".join(OVERRIDE_KEYS), OVERRIDE_NESTED))
    return json.dumps(overrides, sort_keys=True, separators=(", ", ": "))


def tokenizer_in_model_dir(tokenizer_path: Any, model_dir: Any) -> str | None:
    """sglang_tokenizer_path -> the tokenizer-path to write, or None when empty.

    The path is checked, not the files: relative to the target's commit directory or absolute, once
    normalised it must be that directory or a directory inside it (the tree the gate verified).
    """
    where = "sglang_tokenizer_path"
    if tokenizer_path is None or tokenizer_path == "":
        return None
    if not isinstance(tokenizer_path, str):
        raise OptionsError("%s must be a path, got %s" % (where, type(tokenizer_path).__name__))
    if not isinstance(model_dir, str) or not model_dir.startswith("/"):
        raise OptionsError("%s needs the target's commit directory (sglang_target_model or sglang_target_path) "
                           "to check it against" % where)
    root = posixpath.normpath(model_dir)
    path = posixpath.normpath(posixpath.join(root, tokenizer_path))
    if path != root and not path.startswith(root.rstrip("/") + "/"):
        raise OptionsError("%s %s is outside the target's verified commit directory %s: give a directory inside "
                           "it (relative paths are read from it), or leave it empty to use the model's own tokenizer"
                           % (where, tokenizer_path, root))
    return path


def sglang_options(base_args: Any, args: Any = None, role_options: Any = None, *, model_override_args: Any = None,
                   tokenizer_path: Any = None, model_dir: Any = None) -> dict:
    merged = _normalise(base_args, source="sglang_base_args")
    merged.update(_normalise(args, source="sglang_args"))
    if role_options is not None and not isinstance(role_options, dict):
        raise OptionsError("sglang_options: role_options must be a dict, got %s" % type(role_options).__name__)
    checked = {"json-model-override-args": model_override_json(model_override_args),
               "tokenizer-path": tokenizer_in_model_dir(tokenizer_path, model_dir)}
    merged.update((key, value) for key, value in checked.items() if value is not None)
    for key, value in (role_options or {}).items():
        merged[str(key)] = value
    return dict((key, value) for key, value in merged.items() if value is not None)
