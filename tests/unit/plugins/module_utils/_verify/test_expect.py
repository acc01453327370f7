# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._verify import expect as _expect

CONFIG = {"model_type": "kimi_k25", "architectures": ["KimiK25ForConditionalGeneration"],
          "text_config": {"num_hidden_layers": 61, "rope_theta": 50000.0, "tie_word_embeddings": False},
          "quantization_config": {"config_groups": {"group_0": {"weights": {"num_bits": 4}}}},
          "weird-key": 1}


def run(expect):
    return _expect.evaluate(_expect.compile_expectations(expect), CONFIG)


def test_expectations_that_hold():
    details, problems = run({"model_type": "kimi_k25", "text_config.num_hidden_layers": 61,
                             "text_config.rope_theta": 50000, "architectures[0]": "KimiK25ForConditionalGeneration",
                             "values(quantization_config.config_groups)[].weights.num_bits": [4],
                             "text_config.tie_word_embeddings": False, '"weird-key"': 1,
                             "length(architectures)": 1})
    assert problems == [] and all(d["ok"] for d in details) and len(details) == 8


@pytest.mark.parametrize("expect,needle", [
    ({"text_config.num_hidden_layers": 60}, "expect text_config.num_hidden_layers == 60, got 61"),
    ({"text_config.num_hidden_layers": "61"}, 'got 61 (a int where a str was expected)'),
    ({"text_config.tie_word_embeddings": 0}, "got false"),
    ({"model_type": "deepseek_v3"}, 'expect model_type == "deepseek_v3", got "kimi_k25"'),
    ({"text_config.n_routed_experts": 384}, "got nothing (the expression matches no value in config.json)"),
])
def test_mismatch_names_expression_expected_and_actual(expect, needle):
    details, problems = run(expect)
    assert len(problems) == 1 and needle in problems[0] and problems[0].startswith("config.json: ")
    assert not details[0]["ok"]


def test_bool_is_not_int_and_numbers_compare_by_value():
    assert _expect.same_value(61, 61.0) and not _expect.same_value(True, 1) and not _expect.same_value(1, True)
    assert _expect.same_value([1, {"a": 2.0}], [1.0, {"a": 2}]) and not _expect.same_value({"a": 1}, {"a": 1, "b": 2})
    assert not _expect.same_value(None, 0) and _expect.same_value(None, None)


def test_unparsable_expression_is_a_parameter_error():
    with pytest.raises(_expect.ExpectError) as err:
        _expect.compile_expectations({"text_config.[": 1, "ok": 2, "a..b": 3})
    msg = str(err.value)
    assert "'text_config.['" in msg and "'a..b'" in msg and "'ok'" not in msg and "\n" not in msg
    with pytest.raises(_expect.ExpectError, match="must be a dict"):
        _expect.compile_expectations(["model_type"])
    assert _expect.compile_expectations(None) == []
