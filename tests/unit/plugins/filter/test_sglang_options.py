# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.llm.sglang_options: the sglang role's option merge (issue 11 item 1).

The alias table is checked against SGLang 0.5.23's own parser in test_sglang_options_sglang.py;
the role's use of the filter in tests/unit/roles/test_sglang_options_facts.py.
"""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.llm.plugins.filter import sglang_options as filter_module
from ansible_collections.gpufleet.llm.plugins.filter.sglang_options import (
    ALIASES, ROLE_OWNED, FilterModule, sglang_options)

# The --load-format choices that read the verified safetensors (docs/sglang_role.md); the rest of 0.5.23's are refused.
REAL_LOADING = ["auto", "safetensors", "fastsafetensors", "instanttensor"]

BASE = {"host": "127.0.0.1", "port": 30000, "tp-size": 8, "mem-fraction-static": 0.85, "trust-remote-code": True}
ROLE = {"model-path": "/srv/models/t/abc", "speculative-algorithm": "DFLASH",
        "speculative-draft-model-path": "/srv/models/d/def"}


def test_merge_dash_form_user_wins_role_last():
    got = sglang_options(BASE, {"tp_size": 16, "context_length": 131072, "mem-fraction-static": None}, ROLE)
    assert got == {"host": "127.0.0.1", "port": 30000, "tp-size": 16, "trust-remote-code": True,
                   "context-length": 131072, "model-path": "/srv/models/t/abc", "speculative-algorithm": "DFLASH",
                   "speculative-draft-model-path": "/srv/models/d/def"}
    assert FilterModule().filters()["sglang_options"] is sglang_options


@pytest.mark.parametrize("alias, canonical", [
    ("tensor_parallel_size", "tp-size"),
    ("tensor-parallel-size", "tp-size"),
    ("--tensor-parallel-size", "tp-size"),
    ("pipeline_parallel_size", "pp-size"),
    ("ep", "ep-size"),
    ("expert_parallel_size", "ep-size"),
    ("enable_hicache", "enable-hierarchical-cache"),
])
def test_alias_resolved_to_its_option(alias, canonical):
    # the GPU fit reads _sglang_options['tp-size']: it must be the tp the server gets
    got = sglang_options(BASE, {alias: 4})
    assert got[canonical] == 4
    assert alias.lstrip("-").replace("_", "-") not in got or alias.lstrip("-").replace("_", "-") == canonical


def test_alias_in_base_overridden_by_canonical_in_args():
    assert sglang_options({"tensor-parallel-size": 8}, {"tp_size": 2}) == {"tp-size": 2}


@pytest.mark.parametrize("args, both", [
    ({"tp_size": 8, "tp-size": 16}, ("'tp_size'", "'tp-size'")),
    ({"tp-size": 8, "tensor_parallel_size": 16}, ("'tp-size'", "'tensor_parallel_size'")),
    ({"ep": 8, "expert-parallel-size": 8}, ("'ep'", "'expert-parallel-size'")),
    ({"Context_Length": 1, "context-length": 2}, ("'Context_Length'", "'context-length'")),
])
def test_two_spellings_of_one_option_refused(args, both):
    with pytest.raises(AnsibleFilterError) as err:
        sglang_options(BASE, args)
    message = str(err.value)
    assert "sglang_args" in message and "two spellings" in message
    for spelling in both:
        assert spelling in message


def test_two_spellings_in_base_args_refused():
    with pytest.raises(AnsibleFilterError, match="sglang_base_args: 'tp-size' and 'tp_size' are two spellings"):
        sglang_options({"tp-size": 8, "tp_size": 8}, {})


@pytest.mark.parametrize("key, variable", [
    ("model_path", "sglang_target_model"),
    ("model-path", "sglang_target_path"),
    ("model", "sglang_target_model"),  # SGLang's alias of model-path
    ("speculative_draft_model_path", "sglang_drafter_model"),
    ("speculative-draft-model", "sglang_drafter_path"),
    ("speculative_algorithm", "sglang_drafter_model"),
    ("nnodes", "sglang_multinode_group"),
    ("node_rank", "sglang_multinode_group"),
    ("dist_init_addr", "sglang_dist_init_port"),
    ("nccl-init-addr", "sglang_multinode_group"),
    ("api_key", "sglang_api_key"),
    ("config", "sglang_args"),
    ("admin_api_key", "sglang_admin_api_key"),
    ("admin-api-key", "/flush_cache sends it"),
    ("json_model_override_args", "sglang_model_override_args"),
    ("json-model-override-args", "max_position_embeddings, rope_parameters, rope_scaling, rope_theta"),
    ("tokenizer_path", "sglang_tokenizer_path"),
])
@pytest.mark.parametrize("where", ["sglang_args", "sglang_base_args"])
def test_role_owned_option_refused(key, variable, where):
    value = "/elsewhere-secret-value"
    base, args = (BASE, {key: value}) if where == "sglang_args" else (dict(BASE, **{key: value}), {})
    with pytest.raises(AnsibleFilterError) as err:
        sglang_options(base, args, ROLE)
    message = str(err.value)
    assert message.startswith(where + ": %r" % key)
    assert variable in message and "set by the sglang role" in message
    assert value not in message  # values (an api key) never in a message


# --- issue 24 item 2: what would swap the weights after the gate verified them ----------------------------

@pytest.mark.parametrize("option", ["load_format", "load-format", "speculative_draft_load_format"])
@pytest.mark.parametrize("value", ["dummy", "pt", "npcache", "gguf", "remote", "remote_instance", "sharded_state",
                                   "presharded", "layered", "bitsandbytes", "Safetensors", 1, ["auto"]])
@pytest.mark.parametrize("where", ["sglang_args", "sglang_base_args"])
def test_load_format_other_than_real_loading_refused(option, value, where):
    base, args = (BASE, {option: value}) if where == "sglang_args" else (dict(BASE, **{option: value}), {})
    with pytest.raises(AnsibleFilterError) as err:
        sglang_options(base, args, ROLE)
    message = str(err.value)
    assert message.startswith("%s: %r must be one of auto, safetensors, fastsafetensors, instanttensor" % (where, option))
    assert "dummy: random ones" in message


@pytest.mark.parametrize("value", REAL_LOADING + [None])
def test_load_format_that_reads_the_verified_safetensors_passes(value):
    got = sglang_options(BASE, {"load_format": value, "speculative_draft_load_format": value}, ROLE)
    assert got.get("load-format") == value and got.get("speculative-draft-load-format") == value


@pytest.mark.parametrize("key", ["decrypted_config_file", "decrypted-config-file", "decrypted_draft_config_file"])
def test_decrypted_config_refused(key):
    with pytest.raises(AnsibleFilterError) as err:
        sglang_options(BASE, {key: "/elsewhere/config.json"}, ROLE)
    message = str(err.value)
    assert message.startswith("sglang_args: %r is refused: it replaces the" % key) and "config.json" in message
    assert "/elsewhere" not in message


@pytest.mark.parametrize("key, option", [("load_form", "load-format"), ("tokenizer_pa", "tokenizer-path"),
                                         ("json_model", "json-model-override-args"),
                                         ("decrypted", "decrypted-config-file / decrypted-draft-config-file"),
                                         ("admin_api", "admin-api-key")])
def test_prefix_of_a_checked_option_refused(key, option):
    # argparse would read --load-form dummy as --load-format dummy
    with pytest.raises(AnsibleFilterError) as err:
        sglang_options(BASE, {key: "dummy"}, ROLE)
    assert "%r is only the start of %s" % (key, option) in str(err.value)


@pytest.mark.parametrize("overrides, expected", [
    ({"max_position_embeddings": 262144}, '{"max_position_embeddings": 262144}'),
    ({"text_config": {"max_position_embeddings": 262144, "rope_theta": 50000.0}},
     '{"text_config": {"max_position_embeddings": 262144, "rope_theta": 50000.0}}'),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}},
     '{"rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 4096, "rope_type": "yarn"}}'),
    ({"rope_parameters": {"rope_type": "longrope", "long_factor": [1.0, 2.0]}, "rope_scaling": None},
     '{"rope_parameters": {"long_factor": [1.0, 2.0], "rope_type": "longrope"}, "rope_scaling": null}'),
    ({}, None),
    (None, None),
])
def test_model_override_args_written_as_json(overrides, expected):
    got = sglang_options(BASE, {}, ROLE, model_override_args=overrides)
    assert got.get("json-model-override-args") == expected


@pytest.mark.parametrize("overrides, words", [
    ({"architectures": ["DeepseekV3ForCausalLM"]}, "'architectures' cannot be overridden"),
    ({"num_hidden_layers": 1}, "'num_hidden_layers' cannot be overridden"),
    ({"quantization_config": {}}, "'quantization_config' cannot be overridden"),
    ({"text_config": {"vocab_size": 10}}, "sglang_model_override_args.text_config: 'vocab_size' cannot be overridden"),
    ({"text_config": {}}, "text_config must be a non-empty dict"),
    ({"max_position_embeddings": True}, "max_position_embeddings must be a positive integer"),
    ({"max_position_embeddings": 0}, "max_position_embeddings must be a positive integer"),
    ({"rope_theta": -1}, "rope_theta must be a positive number"),
    ({"rope_scaling": "yarn"}, "rope_scaling must be a dict"),
    ({"rope_scaling": {"factor": {"nested": 1}}}, "'factor' must map names to numbers"),
    ('{"max_position_embeddings": 1}', "must be a dict of config.json key -> value, got str"),
])
def test_model_override_args_checked(overrides, words):
    with pytest.raises(AnsibleFilterError) as err:
        sglang_options(BASE, {}, ROLE, model_override_args=overrides)
    assert words in str(err.value)


@pytest.mark.parametrize("path, expected", [
    ("", None),
    ("tokenizer", "/srv/models/t/abc/tokenizer"),
    ("/srv/models/t/abc", "/srv/models/t/abc"),
    ("/srv/models/t/abc/sub/../tok", "/srv/models/t/abc/tok"),
    ("./", "/srv/models/t/abc"),
])
def test_tokenizer_path_inside_the_target(path, expected):
    got = sglang_options(BASE, {}, ROLE, tokenizer_path=path, model_dir="/srv/models/t/abc")
    assert got.get("tokenizer-path") == expected


@pytest.mark.parametrize("path, model_dir, words", [
    ("/srv/models/d/def", "/srv/models/t/abc", "outside the target's verified commit directory /srv/models/t/abc"),
    ("..", "/srv/models/t/abc", "outside"),
    ("../abc-other", "/srv/models/t/abc", "outside"),
    ("/srv/models/t/abcd", "/srv/models/t/abc", "outside"),
    ("tok", "", "needs the target's commit directory"),
    (["tok"], "/srv/models/t/abc", "must be a path, got list"),
])
def test_tokenizer_path_outside_the_target_refused(path, model_dir, words):
    with pytest.raises(AnsibleFilterError) as err:
        sglang_options(BASE, {}, ROLE, tokenizer_path=path, model_dir=model_dir)
    assert words in str(err.value)


def test_owned_message_names_the_option_only_for_an_alias():
    with pytest.raises(AnsibleFilterError) as err:
        sglang_options(BASE, {"model_path": "/x"})
    assert str(err.value).startswith("sglang_args: 'model_path' is set by the sglang role and cannot be given here; use ")
    with pytest.raises(AnsibleFilterError) as err:
        sglang_options(BASE, {"model": "/x"})
    assert str(err.value).startswith("sglang_args: 'model' (SGLang's model-path) is set by the sglang role")


def test_null_cannot_remove_a_role_owned_option():
    with pytest.raises(AnsibleFilterError, match="sglang_target_model"):
        sglang_options(BASE, {"model_path": None}, ROLE)


@pytest.mark.parametrize("key, option", [
    ("model_pat", "model-path"),  # argparse would read --model-pat as --model-path
    ("speculative-draft", "speculative-draft-model-path"),
    ("node_ra", "node-rank"),
    ("nccl_init", "dist-init-addr"),
    ("tensor_parallel", "tp-size"),
    ("tp_siz", "tp-size"),
])
def test_prefix_of_a_guarded_option_refused(key, option):
    with pytest.raises(AnsibleFilterError) as err:
        sglang_options(BASE, {key: "x"}, ROLE)
    assert "%r is only the start of" % key in str(err.value) and option in str(err.value)


@pytest.mark.parametrize("data, message", [
    ([1], "sglang_args must be a dict of SGLang option -> value, got list"),
    ({"tp size": 1}, "'tp size' is not an SGLang option name"),
    ({"": 1}, "'' is not an SGLang option name"),
])
def test_bad_input(data, message):
    with pytest.raises(AnsibleFilterError, match=message):
        sglang_options(BASE, data)


def test_none_args_and_bad_role_options():
    assert sglang_options(BASE, None) == BASE
    with pytest.raises(AnsibleFilterError, match="role_options must be a dict, got str"):
        sglang_options(BASE, {}, "model-path")


def test_tables_are_dash_form_and_consistent():
    for alias, canonical in ALIASES.items():
        assert alias != canonical and canonical not in ALIASES
    refused, load_format = getattr(filter_module, "REFUSED", {}), getattr(filter_module, "LOAD_FORMAT_OPTIONS", ())
    for key in list(ALIASES) + list(ALIASES.values()) + list(ROLE_OWNED) + list(refused) + list(load_format):
        assert key == key.lower().replace("_", "-")
    assert not set(refused) & set(ROLE_OWNED)
    assert list(getattr(filter_module, "VERIFIED_LOAD_FORMATS", ())) == REAL_LOADING
