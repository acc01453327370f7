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

The drafter's own fields are read as SGLang 0.5.23 reads them (``parse_dflash_draft_config`` in
``sglang/srt/speculative/dflash_utils.py``, and ``resolve_target_layer_ids`` /
``build_target_layer_ids`` beside it): each field from ``dflash_config`` first, then the top level; a
key present in ``dflash_config`` wins even when its value is null; integers are whatever Python's
``int()`` accepts (so ``"16"`` and ``16.0`` pass, as they do in SGLang); ``target_layer_ids`` and
``mask_token_id`` are optional (SGLang then picks layers evenly and uses the ``<|MASK|>`` token).
``sglang_problems`` is exactly "would parse_dflash_draft_config raise"; a unit test runs SGLang's own
function on the same configs. ``check_drafter`` adds what SGLang finds only at load time or never
(architecture, num_hidden_layers present, the target-compat checks) and refuses values SGLang
accepts only by coercion (``true`` or ``"16"`` where an integer belongs): a gate should not vouch
for a config whose meaning depends on ``int()``.
"""

from __future__ import annotations

import reprlib


def text_value(config: dict, key: str):
    """``key`` from ``config["text_config"]`` when the target nests it there, else the top level."""
    text = config.get("text_config")
    if isinstance(text, dict) and key in text:
        return text[key]
    return config.get(key)


def first_value(config: dict, keys: tuple):
    for key in keys:
        value = text_value(config, key)
        if value is not None:
            return value
    return None


def facts(config: dict) -> dict:
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


# The draft classes SGLang 0.5.23 registers for DFlash (EntryClass of sglang/srt/models/dflash.py).
# SGLang loads the first registered architecture of the list, so the first entry must be one of these.
DRAFTER_ARCHITECTURES = ("DFlashDraftModel", "DFlashLagunaForCausalLM", "MuseGlimmerAssistantModel",
                         "DFlash2DraftModel", "DFlash2BeamDraftModel", "MiniMaxDFlash2DraftModel")
SGLANG = "SGLang 0.5.23"
FIX_CFG = "use the DFlash drafter built for this target"


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 3, 8, 4, 60, 60


def short_repr(value) -> str:
    """A short repr: a hostile config must not turn one problem line (nor the work of building it) into megabytes."""
    text = _REPR.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _nested(config: dict) -> dict:
    """``dflash_config`` as SGLang takes it: absent or null is {}, a mapping-like value is converted, else {}."""
    value = config.get("dflash_config")
    if value is None or isinstance(value, dict):
        return value or {}
    try:
        return dict(value)
    except (TypeError, ValueError):
        return {}


def _lookup(config: dict, key: str, default=None) -> tuple:
    """(value, label): ``dflash_config[key]`` when the key is there (even null), else the top level's."""
    nested = _nested(config)
    if key in nested:
        return nested[key], "dflash_config." + key
    return config.get(key, default), key


def is_drafter(config: dict) -> bool:
    archs = config.get("architectures")
    named = isinstance(archs, list) and any(isinstance(a, str) and a in DRAFTER_ARCHITECTURES for a in archs)
    return named or isinstance(config.get("dflash_config"), dict)


def _int(value):
    """``value`` when it is an int (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _sglang_int(value, minimum: int | None) -> tuple:
    """(int or None, why not): SGLang's reading of an optional integer field (None stays None)."""
    if value is None:
        return None, None
    try:
        parsed = int(value)
    except (TypeError, ValueError, OverflowError):
        return None, "is %s, not an integer" % short_repr(value)
    if minimum is not None and parsed < minimum:
        return None, "is %d, %s needs an integer >= %d" % (parsed, SGLANG, minimum)
    return parsed, None


def _draft_layers(config: dict):
    """num_hidden_layers of the drafter's text config (the config itself unless it has ``text_config``)."""
    text = config.get("text_config", config)
    return (text.get("num_hidden_layers"), "num_hidden_layers") if isinstance(text, dict) else (None, "")


def _parse_ints(config: dict, values: dict, bad: list) -> None:
    nested = _nested(config)
    fields = (("num_hidden_layers", _draft_layers(config), 1),
              ("num_target_layers", _lookup(config, "num_target_layers"), 1),
              ("block_size", _lookup(config, "block_size"), 1))
    fields += tuple((key, (nested.get(key, 0), "dflash_config." + key), 0)
                    for key in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"))
    for key, (value, label), minimum in fields:
        values[key], why = _sglang_int(value, minimum)
        if why:
            bad.append((label, why))
    for one, two in (("conv_kernel_size", "conv_group_size"), ("selector_rank", "selector_top_k")):
        if bool(values[one]) != bool(values[two]):
            bad.append(("dflash_config." + one, "and dflash_config.%s must be set together (%s and %s)"
                        % (two, values[one], values[two])))


def _float_ok(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def _parse_extras(config: dict, bad: list) -> None:
    """The fields that do not bear on the target but still make SGLang refuse the drafter."""
    nested = _nested(config)
    multiplier = nested.get("output_multiplier", 1.0)
    if not _float_ok(multiplier) or float(multiplier) <= 0:
        bad.append(("dflash_config.output_multiplier", "is %s, not a positive number" % short_repr(multiplier)))
    if not _float_ok(nested.get("final_logit_softcapping") or 0.0):
        bad.append(("dflash_config.final_logit_softcapping", "is %s, not a number"
                    % short_repr(nested.get("final_logit_softcapping"))))
    token, label = _lookup(config, "mask_token")
    if token is not None and (not isinstance(token, str) or not token):
        bad.append((label, "is %s, not a non-empty string" % short_repr(token)))
    if not isinstance(nested.get("attention_sink_bias", False), bool):
        bad.append(("dflash_config.attention_sink_bias", "is %s, not true or false"
                    % short_repr(nested.get("attention_sink_bias"))))
    scale = nested.get("attention_value_scale")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        bad.append(("dflash_config.attention_value_scale", "is %s, not a number" % short_repr(scale)))


def _parse_domino(config: dict, values: dict, bad: list) -> None:
    """The Domino projector's extra fields (``projector_type: domino``)."""
    nested = _nested(config)
    shift, label = _lookup(config, "shift_label")
    if not isinstance(shift, bool):
        bad.append((label, "is %s; the domino projector needs true or false" % short_repr(shift)))
    prefix, label = _lookup(config, "pure_draft_prefix_len")
    prefix, why = _sglang_int(prefix, 0)
    if why or prefix != 1:
        bad.append((label, why or "is %s; %s's domino projector needs 1" % (prefix, SGLANG)))
    gru, label = _lookup(config, "gru_hidden_dim")
    gru, why = _sglang_int(gru, 1)
    if why or gru is None:
        bad.append((label, why or "is missing; the domino projector needs it"))
    inner, why_inner = _sglang_int(nested.get("emb_dim"), 1)
    outer, why_outer = _sglang_int(config.get("emb_dim"), 1)
    if why_inner or why_outer:
        bad.append(("dflash_config.emb_dim" if why_inner else "emb_dim", why_inner or why_outer))
    elif inner is not None and outer is not None and inner != outer:
        bad.append(("emb_dim", "is %d but dflash_config.emb_dim is %d" % (outer, inner)))
    elif inner is None and outer is None:
        bad.append(("dflash_config.emb_dim", "is missing; the domino projector needs it"))
    if values["block_size"] is not None and values["block_size"] <= 1:
        bad.append(("block_size", "is %d; the domino projector needs more than 1" % values["block_size"]))


def parse_drafter(config: dict) -> tuple:
    """(values, bad): the fields as SGLang 0.5.23 reads them, and [(label, why)] for each it refuses.

    ``values``: num_hidden_layers, num_target_layers, block_size, target_layer_ids, mask_token_id
    (None when absent or refused). ``bad`` is empty exactly when parse_dflash_draft_config would not raise.
    """
    values: dict = {}
    bad: list = []
    _parse_ints(config, values, bad)
    _parse_extras(config, bad)
    ids, label = _lookup(config, "target_layer_ids")
    values["target_layer_ids"] = None
    if ids is not None:
        parsed = [_sglang_int(i, None)[0] for i in ids] if isinstance(ids, list) else None
        if parsed is None or not parsed or None in parsed:
            bad.append((label, "is %s, not a non-empty list of integers" % short_repr(ids)))
        else:
            values["target_layer_ids"] = parsed
    mask, label = _lookup(config, "mask_token_id")
    values["mask_token_id"] = None
    if mask is not None and (_int(mask) is None or mask < 0):
        bad.append((label, "is %s, not a non-negative integer" % short_repr(mask)))
    elif mask is not None:
        values["mask_token_id"] = mask
    projector, _label = _lookup(config, "projector_type")
    if projector == "domino":
        _parse_domino(config, values, bad)
    return values, bad


def sglang_problems(config: dict, name: str = "drafter config.json") -> list:
    """One problem line per field that makes SGLang 0.5.23's parse_dflash_draft_config refuse ``config``."""
    return ["%s: %s %s (%s refuses it); %s" % (name, label, why, SGLANG, FIX_CFG)
            for label, why in parse_drafter(config)[1]]


def drafter_facts(config: dict) -> dict:
    """The drafter's fields as SGLang reads them (raw values; nested ``dflash_config`` first)."""
    return {
        "block_size": _lookup(config, "block_size")[0],
        "target_layer_ids": _lookup(config, "target_layer_ids")[0],
        "mask_token_id": _lookup(config, "mask_token_id")[0],
        "num_hidden_layers": _draft_layers(config)[0],
        "num_target_layers": _lookup(config, "num_target_layers")[0],
        "hidden_size": config.get("hidden_size"),
        "vocab_size": config.get("vocab_size"),
    }


def _architecture_problems(drafter: dict, name: str) -> list:
    archs = drafter.get("architectures")
    first = archs[0] if isinstance(archs, list) and archs else None
    if isinstance(first, str) and first in DRAFTER_ARCHITECTURES:
        return []
    return ["%s is not a DFlash drafter config: architectures is %s, and %s loads a DFlash drafter only when the "
            "first entry is one of %s; point path at the DFlash drafter (or drop target)"
            % (name, short_repr(archs), SGLANG, ", ".join(DRAFTER_ARCHITECTURES))]


def _target_layers(target: dict):
    """The target's layer count as SGLang counts it: num_hidden_layers times num_loops (loop models)."""
    layers = _int(text_value(target, "num_hidden_layers"))
    loops = _int(text_value(target, "num_loops"))
    return layers * loops if layers is not None and loops is not None and loops >= 1 else layers


def _layer_problems(values: dict, t_layers: int, name: str) -> list:
    problems = []
    ids = values["target_layer_ids"]
    if ids is not None:
        out = [i for i in ids if not 0 <= i < t_layers]
        if out:
            problems.append("%s: dflash_config.target_layer_ids %s outside [0, %d) (the target has %d layers); %s"
                            % (name, short_repr(out), t_layers, t_layers, FIX_CFG))
    elif values["num_hidden_layers"] is not None and values["num_hidden_layers"] > 1 and t_layers < 4:
        # build_target_layer_ids spreads the drafter's layers over [1, target layers - 3].
        problems.append("%s: no target_layer_ids, and %s's default choice of %d layers needs a target of at least "
                        "4 layers (it has %d); %s" % (name, SGLANG, values["num_hidden_layers"], t_layers, FIX_CFG))
    if values["num_target_layers"] is not None and values["num_target_layers"] != t_layers:
        problems.append("%s: num_target_layers is %r but the target has %d layers; %s"
                        % (name, values["num_target_layers"], t_layers, FIX_CFG))
    return problems


def _strict_problems(drafter: dict, bad: list, name: str) -> list:
    """Values SGLang accepts only because ``int()`` coerces them (true, 16.0, "16"): almost surely not meant."""
    refused = {label for label, _why in bad}
    problems = []
    for value, label in (_draft_layers(drafter), _lookup(drafter, "num_target_layers"), _lookup(drafter, "block_size")):
        if value is not None and _int(value) is None and label not in refused:
            problems.append("%s: %s is %s, not an integer (%s would read it as %d); write the integer; %s"
                            % (name, label, short_repr(value), SGLANG, int(value), FIX_CFG))
    ids, label = _lookup(drafter, "target_layer_ids")
    if isinstance(ids, list) and label not in refused and any(_int(i) is None for i in ids):
        problems.append("%s: %s is %s, not a non-empty list of integers (%s would coerce it with int()); write "
                        "integers; %s" % (name, label, short_repr(ids), SGLANG, FIX_CFG))
    return problems


def check_drafter(drafter: dict, target: dict, drafter_name: str = "drafter config.json",
                  target_name: str = "target config.json") -> list:
    """Problems (one line each, with the fix) that keep ``drafter`` from serving ``target``.

    ``drafter`` and ``target`` are parsed config.json dicts.
    """
    problems = _architecture_problems(drafter, drafter_name)
    values, bad = parse_drafter(drafter)
    problems += ["%s: %s %s (%s refuses it); %s" % (drafter_name, label, why, SGLANG, FIX_CFG) for label, why in bad]
    problems += _strict_problems(drafter, bad, drafter_name)
    if values["num_hidden_layers"] is None and not any(label == "num_hidden_layers" for label, _why in bad):
        problems.append("%s is not a DFlash drafter config: no num_hidden_layers (%s needs it to load the drafter); "
                        "point path at the DFlash drafter (or drop target)" % (drafter_name, SGLANG))
    t_hidden = _int(text_value(target, "hidden_size"))
    t_vocab = _int(text_value(target, "vocab_size"))
    t_layers = _target_layers(target)
    for key, want in (("hidden_size", t_hidden), ("vocab_size", t_vocab)):
        have = drafter.get(key)
        if want is None:
            problems.append("%s has no integer %s (nor text_config.%s); check target points at the target model"
                            % (target_name, key, key))
        elif _int(have) is None or have != want:
            problems.append("%s: %s is %s but the target's is %d: this drafter was built for another model; %s"
                            % (drafter_name, key, short_repr(have), want, FIX_CFG))
    if t_layers is None:
        problems.append("%s has no integer num_hidden_layers (nor text_config.num_hidden_layers); check target"
                        % target_name)
    else:
        problems += _layer_problems(values, t_layers, drafter_name)
    mask = values["mask_token_id"]
    if mask is not None and t_vocab is not None and not mask < t_vocab:
        problems.append("%s: mask_token_id %r is not a token id of the target (vocab size %d); %s"
                        % (drafter_name, mask, t_vocab, FIX_CFG))
    return problems
