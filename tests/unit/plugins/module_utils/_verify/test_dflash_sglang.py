# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_dflash reads a drafter as SGLang 0.5.23 does: the rules of issue 10 item 11, and agreement with SGLang itself.

The agreement test runs the REAL ``parse_dflash_draft_config`` and ``resolve_target_layer_ids`` of the
lab's SGLang 0.5.23 venv (sglang_env locates it, as the preflight tests do) on the same configs and
compares verdicts. dflash_utils.py imports torch and CUDA kernels at module level, which a CPU venv
cannot load, so the functions are lifted out of the installed source file by name (ast) and run in
that venv's interpreter with the standard-library names they use: SGLang's own code, unmodified.
"""
from __future__ import annotations

import copy
import json
import random
import subprocess

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._verify import dflash as _dflash
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import model_trees as mt
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.sglang_env import (  # noqa: F401 pylint: disable=unused-import
    sglang_python)

TARGET = mt.target_config()
T_LAYERS = mt.TARGET_LAYERS

# Runs in the SGLang venv: argv[1] is unused; stdin is [{"config": ..., "target_layers": n}], stdout the verdicts.
SGLANG_SIDE = r'''
import ast, json, sys
import importlib.util
spec = importlib.util.find_spec("sglang")
path = spec.submodule_search_locations[0] + "/srt/speculative/dflash_utils.py"
with open(path) as handle:
    tree = ast.parse(handle.read())
wanted = {"DEFAULT_DFLASH_MASK_TOKEN", "_cfg_get", "_get_text_config", "_get_dflash_config", "_parse_optional_int",
          "DFlashDraftConfig", "build_target_layer_ids", "parse_dflash_draft_config"}
body = []
for node in tree.body:
    names = {t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)} | {getattr(node, "name", None)}
    if names & wanted:
        body.append(node)
found = {getattr(n, "name", None) for n in body} | {t.id for n in body for t in getattr(n, "targets", [])}
assert found >= wanted, sorted(wanted - found)
namespace = {}
exec("from __future__ import annotations\nfrom dataclasses import dataclass\nfrom numbers import Integral\n"
     "from typing import Any, List, Optional, Sequence, Tuple\n", namespace)
exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), namespace)
out = []
for case in json.load(sys.stdin):
    try:
        parsed = namespace["parse_dflash_draft_config"](draft_hf_config=case["config"])
    except Exception as exc:  # any raise is a refusal, as at server start
        out.append({"parse": False, "why": "%s: %s" % (type(exc).__name__, exc)})
        continue
    layers = None
    if parsed.num_hidden_layers is not None:
        try:
            parsed.resolve_target_layer_ids(target_num_layers=case["target_layers"],
                                            draft_num_layers=parsed.num_hidden_layers)
            layers = True
        except Exception as exc:
            layers = False
    out.append({"parse": True, "layers": layers})
json.dump(out, sys.stdout)
'''


def _drafter(**changes):
    cfg = copy.deepcopy(mt.drafter_config())
    for key, value in changes.items():
        if value is _DROP:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    return cfg


_DROP = object()
NESTED_ONLY = _drafter(block_size=_DROP, num_target_layers=_DROP,
                       dflash_config={"block_size": 8, "num_target_layers": T_LAYERS, "mask_token_id": 163838,
                                      "target_layer_ids": [1, 12, 24, 35, 47, 58]})
DEFAULTS = _drafter(dflash_config=_DROP, block_size=_DROP, num_target_layers=_DROP)


def _layer_problems(problems):
    return [p for p in problems if "target_layer_ids" in p or "at least 4" in p]


# --- the rules, each against today's reading -------------------------------------------------------

def test_nested_wrong_value_refused():
    """dflash_config.block_size wins over the top level: 0 there is refused even with a good top-level 16."""
    for key, bad in (("block_size", 0), ("num_target_layers", 0), ("mask_token_id", -1),
                     ("target_layer_ids", []), ("block_size", "x")):
        drafter = _drafter()
        drafter["dflash_config"][key] = bad
        problems = _dflash.check_drafter(drafter, TARGET)
        assert any("dflash_config.%s is" % key in p and "SGLang 0.5.23 refuses it" in p for p in problems), problems
        assert _dflash.sglang_problems(drafter)


def test_nested_null_wins_over_top_level():
    """A key present in dflash_config, even null, hides the top-level one (SGLang's dict.get default)."""
    drafter = _drafter(block_size=0)
    drafter["dflash_config"]["block_size"] = None
    assert _dflash.check_drafter(drafter, TARGET) == []
    assert _dflash.drafter_facts(drafter)["block_size"] is None


def test_nested_only_valid_config_accepted():
    assert _dflash.check_drafter(NESTED_ONLY, TARGET) == []
    facts = _dflash.drafter_facts(NESTED_ONLY)
    assert facts["block_size"] == 8 and facts["num_target_layers"] == T_LAYERS
    wrong = copy.deepcopy(NESTED_ONLY)
    wrong["dflash_config"]["num_target_layers"] = 62
    assert any("num_target_layers is 62 but the target has 61" in p for p in _dflash.check_drafter(wrong, TARGET))


def test_defaults_accepted_and_default_layers_need_four_target_layers():
    """No dflash_config, no block_size: SGLang picks layer ids and the mask token itself."""
    assert _dflash.check_drafter(DEFAULTS, TARGET) == []
    small = {"hidden_size": mt.HIDDEN, "vocab_size": mt.VOCAB, "num_hidden_layers": 3}
    problems = _dflash.check_drafter(DEFAULTS, small)
    assert len(problems) == 1 and "at least 4 layers (it has 3)" in problems[0], problems
    one_layer = _drafter(dflash_config=_DROP, num_target_layers=_DROP, num_hidden_layers=1)
    assert _dflash.check_drafter(one_layer, small) == []


@pytest.mark.parametrize("archs", [["LlamaForCausalLM"], ["LlamaForCausalLM", "DFlashDraftModel"], 1, None, []])
def test_architecture_must_be_a_dflash_drafter(archs):
    problems = _dflash.check_drafter(_drafter(architectures=archs), TARGET)
    assert len(problems) == 1 and "is not a DFlash drafter config: architectures is" in problems[0], problems


@pytest.mark.parametrize("arch", _dflash.DRAFTER_ARCHITECTURES)
def test_every_registered_dflash_class_accepted(arch):
    assert _dflash.check_drafter(_drafter(architectures=[arch]), TARGET) == []


def test_missing_num_hidden_layers():
    problems = _dflash.check_drafter(_drafter(num_hidden_layers=_DROP), TARGET)
    assert len(problems) == 1 and "no num_hidden_layers" in problems[0], problems


@pytest.mark.parametrize("key,value", [("block_size", True), ("block_size", "16"), ("num_target_layers", 61.0)])
def test_values_sglang_only_coerces_are_refused(key, value):
    drafter = _drafter(**{key: value})
    assert _dflash.sglang_problems(drafter) == []  # SGLang takes them (int())
    problems = _dflash.check_drafter(drafter, TARGET)
    assert len(problems) == 1 and "%s is %r, not an integer" % (key, value) in problems[0], problems


def test_hostile_values_never_crash():
    for value in (1e308, float("inf"), float("nan"), "1" * 5000, [[[]]], {"a": 1}, -10 ** 40, 10 ** 40):
        for key in ("block_size", "num_target_layers", "mask_token_id", "target_layer_ids", "num_hidden_layers"):
            drafter = _drafter()
            drafter["dflash_config"][key] = value
            assert isinstance(_dflash.check_drafter(drafter, TARGET), list)
        assert isinstance(_dflash.check_drafter(_drafter(dflash_config=value), TARGET), list)


# --- agreement with SGLang's own functions -----------------------------------------------------------

POOL = {
    "block_size": [16, 1, 0, -3, "16", " 8 ", "x", 2.5, True, False, None, [4], 1e400],
    "num_target_layers": [T_LAYERS, 62, 0, "61", None, "abc", 61.0],
    "target_layer_ids": [[1, 12, 58], [], [1, "2"], [1, "x"], [None], "1,2", [0, 61], [-1], [1.5], None, [True]],
    "mask_token_id": [163838, 0, -1, 5.0, True, "5", None, 163840],
    "num_hidden_layers": [5, 1, 0, "3", None, "x"],
    "conv_kernel_size": [0, 3, -1, None, "a"],
    "conv_group_size": [0, 2, None],
    "selector_rank": [0, 4, None],
    "selector_top_k": [0, 8, -2],
    "output_multiplier": [1.0, 0, -1, "2", "x", None, [1]],
    "final_logit_softcapping": [None, 0, 30.0, "abc", "", [1]],
    "mask_token": ["<|MASK|>", "", 5, None],
    "attention_sink_bias": [False, True, "yes", None, 0],
    "attention_value_scale": [None, 0.5, 2, True, "1"],
    "projector_type": [None, "linear", "domino"],
    "shift_label": [True, None, "true"],
    "pure_draft_prefix_len": [1, 0, None, "1"],
    "gru_hidden_dim": [64, 0, None],
    "emb_dim": [128, 64, None, 0],
}
NESTED_ONLY_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k", "output_multiplier",
                    "final_logit_softcapping", "attention_sink_bias", "attention_value_scale")


def _random_configs(count, seed=20261203):
    """``count`` drafters: each pool field absent, nested, top level or both (nested first per SGLang), seeded."""
    rng = random.Random(seed)
    out = []
    for _case in range(count):
        cfg = {"architectures": ["DFlashDraftModel"], "hidden_size": mt.HIDDEN, "vocab_size": mt.VOCAB}
        nested = {}
        for key, pool in POOL.items():
            where = rng.choice(("absent", "absent", "nested", "top", "both"))
            if where in ("nested", "both"):
                nested[key] = rng.choice(pool)
            if where in ("top", "both") and key not in NESTED_ONLY_KEYS:
                cfg[key] = rng.choice(pool)
        shape = rng.random()
        if shape < 0.8:
            cfg["dflash_config"] = nested
        elif shape < 0.9:
            cfg["dflash_config"] = sorted(nested.items())  # mapping-like: SGLang converts it with dict()
        else:
            cfg["dflash_config"] = rng.choice([None, "x", 5, ["ab"]])
        out.append(cfg)
    return out


def _as_json(value):
    return json.loads(json.dumps(value, allow_nan=True))


def test_verdicts_agree_with_sglang_0_5_23(sglang_python):  # noqa: F811
    handpicked = [mt.drafter_config(), NESTED_ONLY, DEFAULTS] + [
        _drafter(**{key: value}) for key in ("block_size", "num_target_layers", "mask_token_id", "target_layer_ids")
        for value in POOL[key] if value != 1e400]
    configs = handpicked + _random_configs(600)
    cases = [{"config": _as_json(cfg), "target_layers": rng_layers}
             for cfg, rng_layers in zip(configs, [T_LAYERS, 3, 4, 61, 2] * len(configs))]
    done = subprocess.run([sglang_python, "-c", SGLANG_SIDE], input=json.dumps(cases).encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    verdicts = json.loads(done.stdout)
    assert len(verdicts) == len(cases)
    refused = 0
    for case, theirs in zip(cases, verdicts):
        ours = _dflash.sglang_problems(case["config"])
        assert (not ours) == theirs["parse"], (case["config"], ours, theirs)
        refused += not theirs["parse"]
        if theirs["parse"] and theirs["layers"] is not None:
            target = {"hidden_size": mt.HIDDEN, "vocab_size": mt.VOCAB, "num_hidden_layers": case["target_layers"]}
            layer_problems = _layer_problems(_dflash.check_drafter(case["config"], target))
            strict = [p for p in layer_problems if "coerce it with int()" in p]
            assert (not (set(layer_problems) - set(strict))) == theirs["layers"], (case, layer_problems, theirs)
    # The mix must exercise both verdicts, or agreement proves little.
    assert 0.2 * len(cases) < refused < 0.9 * len(cases), refused
