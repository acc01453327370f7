# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import copy

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._verify import dflash as _dflash
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import model_trees as mt


def test_compatible_pair_and_facts():
    target, drafter = mt.target_config(), mt.drafter_config()
    assert _dflash.check_drafter(drafter, target) == []
    assert _dflash.is_drafter(drafter) and not _dflash.is_drafter(target)
    facts = _dflash.facts(target)
    assert facts["model_type"] == "kimi_k25" and facts["layers"] == 61 and facts["experts"] == 384
    assert facts["hidden_size"] == 7168 and facts["vocab_size"] == 163840 and facts["trust_remote_code"]
    assert _dflash.drafter_facts(drafter)["target_layer_ids"] == [1, 12, 24, 35, 47, 58]


def test_flat_target_config():
    flat = {"model_type": "qwen3", "hidden_size": 7168, "vocab_size": 163840, "num_hidden_layers": 61}
    assert _dflash.check_drafter(mt.drafter_config(), flat) == []


@pytest.mark.parametrize("change,needle", [
    (lambda d: d.update(hidden_size=4096), "hidden_size is 4096 but the target's is 7168"),
    (lambda d: d.update(vocab_size=151936), "vocab_size is 151936 but the target's is 163840"),
    (lambda d: d["dflash_config"].update(target_layer_ids=[0, 61, -1]), "target_layer_ids [61, -1] outside [0, 61)"),
    (lambda d: d["dflash_config"].update(target_layer_ids=[]), "not a non-empty list of integers"),
    (lambda d: d["dflash_config"].update(target_layer_ids=[1, "2"]), "not a non-empty list of integers"),
    (lambda d: d.update(num_target_layers=62), "num_target_layers is 62 but the target has 61 layers"),
    (lambda d: d.update(block_size=0), "block_size is 0"),
    (lambda d: d.update(block_size=True), "block_size is True"),
    (lambda d: d["dflash_config"].update(mask_token_id=163840), "mask_token_id 163840 is not a token id"),
    (lambda d: d.update(architectures=["Qwen3ForCausalLM"]), "is not a DFlash drafter config: architectures is"),
    (lambda d: d.pop("num_hidden_layers"), "no num_hidden_layers"),
    (lambda d: d["dflash_config"].update(block_size=0), "dflash_config.block_size is 0"),
])
def test_incompatible_drafter(change, needle):
    drafter = copy.deepcopy(mt.drafter_config())
    change(drafter)
    problems = _dflash.check_drafter(drafter, mt.target_config())
    assert any(needle in p for p in problems), problems
    assert all(p.startswith("drafter config.json") for p in problems)


def test_target_without_numbers():
    problems = _dflash.check_drafter(mt.drafter_config(), {"model_type": "x"}, target_name="target t/config.json")
    assert len(problems) == 3 and all("target t/config.json has no integer" in p for p in problems)
