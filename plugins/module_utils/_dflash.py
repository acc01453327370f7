# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A DFlash drafter's config and whether it fits the target model it is meant to serve.

Private to the collection: not a public API, may change without notice.

A DFlash drafter has no embedding or LM head of its own: it reads the target's hidden states at
``dflash_config.target_layer_ids`` and uses the target's embeddings, so its ``hidden_size`` and
``vocab_size`` must equal the target's and every layer id must exist in the target. A mismatch
does not fail at load time in every server; it shows up as garbage drafts and an accept length
near 1, or as an index error deep in a CUDA graph capture. Multimodal targets (Kimi K2.x) nest the
language model's numbers under ``text_config``.
"""

from __future__ import annotations

DRAFTER_ARCHITECTURES = ("DFlashDraftModel",)


def text_value(config, key):
    """``key`` from ``config["text_config"]`` when the target nests it there, else the top level."""
    text = config.get("text_config")
    if isinstance(text, dict) and key in text:
        return text[key]
    return config.get(key)


def first_value(config, keys):
    for key in keys:
        value = text_value(config, key)
        if value is not None:
            return value
    return None


def facts(config):
    """The config facts model_verify reports (None where the config does not say)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    return {
        "model_type": config.get("model_type"),
        "text_model_type": text.get("model_type"),
        "architectures": config.get("architectures"),
        "layers": text_value(config, "num_hidden_layers"),
        "experts": first_value(config, ("n_routed_experts", "num_experts", "num_local_experts")),
        "experts_per_token": text_value(config, "num_experts_per_tok"),
        "hidden_size": text_value(config, "hidden_size"),
        "vocab_size": text_value(config, "vocab_size"),
        "torch_dtype": text_value(config, "torch_dtype") or config.get("dtype"),
        "quantization": (config.get("quantization_config") or {}).get("quant_method")
        if isinstance(config.get("quantization_config"), dict) else None,
        "trust_remote_code": bool(config.get("auto_map")),
    }


def is_drafter(config):
    archs = config.get("architectures") or []
    return isinstance(config.get("dflash_config"), dict) or any(a in DRAFTER_ARCHITECTURES for a in archs)


def _int(value):
    """``value`` when it is an int (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def drafter_facts(config):
    dcfg = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    mask = dcfg.get("mask_token_id", config.get("mask_token_id"))
    return {
        "block_size": config.get("block_size"),
        "target_layer_ids": dcfg.get("target_layer_ids"),
        "mask_token_id": mask,
        "num_hidden_layers": config.get("num_hidden_layers"),
        "num_target_layers": config.get("num_target_layers"),
        "hidden_size": config.get("hidden_size"),
        "vocab_size": config.get("vocab_size"),
    }


def check_drafter(drafter, target, drafter_name="drafter config.json", target_name="target config.json"):
    """Problems (one line each, with the fix) that keep ``drafter`` from serving ``target``.

    ``drafter`` and ``target`` are parsed config.json dicts.
    """
    problems = []
    d = drafter_facts(drafter)
    fix_cfg = "use the DFlash drafter built for this target"

    # 1. Is it a DFlash config at all?
    missing = []
    if not isinstance(drafter.get("dflash_config"), dict):
        missing.append("dflash_config")
    for key in ("block_size", "num_hidden_layers"):
        if key not in drafter:
            missing.append(key)
    if d["target_layer_ids"] is None:
        missing.append("dflash_config.target_layer_ids")
    if d["mask_token_id"] is None:
        missing.append("dflash_config.mask_token_id")
    if missing:
        problems.append("%s is not a DFlash drafter config: missing %s; point path at the DFlash drafter (or drop target)"
                        % (drafter_name, ", ".join(missing)))
    block = d["block_size"]
    if "block_size" in drafter and (_int(block) is None or block < 1):
        problems.append("%s: block_size is %r, not a positive integer; %s" % (drafter_name, block, fix_cfg))
    layers = d["num_hidden_layers"]
    if "num_hidden_layers" in drafter and (_int(layers) is None or layers < 1):
        problems.append("%s: num_hidden_layers is %r, not a positive integer; %s" % (drafter_name, layers, fix_cfg))

    # 2. Against the target.
    t_hidden = _int(text_value(target, "hidden_size"))
    t_vocab = _int(text_value(target, "vocab_size"))
    t_layers = _int(text_value(target, "num_hidden_layers"))
    for key, want in (("hidden_size", t_hidden), ("vocab_size", t_vocab)):
        if want is None:
            problems.append("%s has no integer %s (nor text_config.%s); check target points at the target model"
                            % (target_name, key, key))
        elif d[key] != want or _int(d[key]) is None:
            problems.append("%s: %s is %r but the target's is %d: this drafter was built for another model; %s"
                            % (drafter_name, key, d[key], want, fix_cfg))
    if t_layers is None:
        problems.append("%s has no integer num_hidden_layers (nor text_config.num_hidden_layers); check target"
                        % target_name)
    ids = d["target_layer_ids"]
    if ids is not None:
        if not isinstance(ids, list) or not ids or any(_int(i) is None for i in ids):
            problems.append("%s: dflash_config.target_layer_ids is %r, not a non-empty list of integers; %s"
                            % (drafter_name, ids, fix_cfg))
        elif t_layers is not None:
            out = [i for i in ids if not 0 <= i < t_layers]
            if out:
                problems.append("%s: dflash_config.target_layer_ids %s outside [0, %d) (the target has %d layers); %s"
                                % (drafter_name, out, t_layers, t_layers, fix_cfg))
    if d["num_target_layers"] is not None and t_layers is not None and d["num_target_layers"] != t_layers:
        problems.append("%s: num_target_layers is %r but the target has %d layers; %s"
                        % (drafter_name, d["num_target_layers"], t_layers, fix_cfg))
    mask = d["mask_token_id"]
    if mask is not None and t_vocab is not None and (_int(mask) is None or not 0 <= mask < t_vocab):
        problems.append("%s: dflash_config.mask_token_id %r is not a token id of the target (vocab size %d); %s"
                        % (drafter_name, mask, t_vocab, fix_cfg))
    return problems
