# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang role's option merge as it ships: the _sglang_options expression of
roles/sglang/tasks/facts.yml, rendered by a real ansible-playbook run on localhost (no lab).

Issue 11 item 1: sglang_args could replace model-path (and the other options the gate verified)
because it was combined last; an alias (tensor-parallel-size) left tp-size, which the GPU fit
reads, at the base value.
"""
from __future__ import annotations

import os

import yaml

import pytest

from ansible_collections.gpufleet.llm.tests.unit.fixtures.localplay import ROOT, run_play

pytestmark = pytest.mark.playbook  # runs a real ansible-playbook (tests/unit/conftest.py)

FACTS = os.path.join(ROOT, "roles", "sglang", "tasks", "facts.yml")
BASE = {"host": "127.0.0.1", "port": 30000, "tp-size": 8, "mem-fraction-static": 0.85, "trust-remote-code": True}
TARGET = "/srv/models/t/abc"
DRAFTER = "/srv/models/d/def"

CASES = [
    # (sglang_args, nnodes, expected options or the words the failure must contain)
    ({"tp_size": 4, "mem_fraction_static": None}, 1,
     dict(BASE, **{"tp-size": 4, "model-path": TARGET, "speculative-algorithm": "DFLASH",
                   "speculative-draft-model-path": DRAFTER, "mem-fraction-static": None})),
    ({"tensor_parallel_size": 16}, 2,
     dict(BASE, **{"tp-size": 16, "model-path": TARGET, "speculative-algorithm": "DFLASH",
                   "speculative-draft-model-path": DRAFTER, "nnodes": 2, "node-rank": 0,
                   "dist-init-addr": "rank0:50000"})),  # rank0 has no ansible_host here
    ({"model_path": "/elsewhere"}, 1, ["sglang_args", "'model_path'", "sglang_target_model", "sglang_target_path"]),
    ({"model": "/elsewhere"}, 1, ["sglang_args", "'model'", "model-path", "sglang_target_model"]),
    ({"speculative_draft_model_path": "/x"}, 1, ["sglang_drafter_model", "sglang_drafter_path"]),
    ({"speculative_algorithm": "EAGLE"}, 1, ["'speculative_algorithm'", "sglang_drafter_model"]),
    ({"node_rank": 1}, 2, ["'node_rank'", "sglang_multinode_group"]),
    ({"dist_init_addr": "10.9.9.9:1"}, 2, ["'dist_init_addr'", "sglang_dist_init_port"]),
    ({"nnodes": 1}, 2, ["'nnodes'", "sglang_multinode_group"]),
    ({"model_path": None}, 1, ["'model_path'", "sglang_target_model"]),
    ({"tp_size": 8, "tp-size": 16}, 1, ["'tp_size'", "'tp-size'", "two spellings"]),
    # issue 24 item 2: what swaps the weights after the gate is refused, or comes only through a checked variable
    ({"load_format": "dummy"}, 1, ["'load_format'", "auto, safetensors, fastsafetensors, instanttensor"]),
    ({"speculative_draft_load_format": "dummy"}, 1, ["'speculative_draft_load_format'", "safetensors"]),
    ({"json_model_override_args": '{"num_hidden_layers": 1}'}, 1, ["'json_model_override_args'", "sglang_model_override_args"]),
    ({"tokenizer_path": "/elsewhere"}, 1, ["'tokenizer_path'", "sglang_tokenizer_path"]),
    ({"decrypted_config_file": "/elsewhere/config.json"}, 1, ["'decrypted_config_file'", "is refused"]),
    ({"decrypted-draft-config-file": "/elsewhere/config.json"}, 1, ["'decrypted-draft-config-file'", "is refused"]),
    ({"admin_api_key": "sk-admin-NOT-A-SECRET"}, 1, ["'admin_api_key'", "sglang_admin_api_key"]),
    ({"load_format": "safetensors"}, 1,
     dict(BASE, **{"load-format": "safetensors", "model-path": TARGET, "speculative-algorithm": "DFLASH",
                   "speculative-draft-model-path": DRAFTER})),
]


DEFAULTS = os.path.join(ROOT, "roles", "sglang", "defaults", "main.yml")
PLAY_VARS = {"sglang_base_args": BASE, "_sglang_target": TARGET, "_sglang_drafter": DRAFTER,
             "_sglang_node_rank": "0", "_sglang_rank0": "rank0", "sglang_dist_init_port": 50000,
             "sglang_model_override_args": {}, "sglang_tokenizer_path": "",
             # the role's log-level (default warning) merged over sglang_base_args: test_sglang_router_roll_facts.py
             "sglang_log_level": ""}


def _default(name):
    """The role's default of ``name`` as shipped (an expression is rendered in the play)."""
    with open(DEFAULTS) as handle:
        return yaml.safe_load(handle)[name]


def _merge_task():
    with open(FACTS) as handle:
        tasks = yaml.safe_load(handle)
    for task in tasks:
        fact = task.get("ansible.builtin.set_fact", {})
        if "_sglang_options" in fact:
            return fact["_sglang_options"]
    raise AssertionError("no _sglang_options fact in %s" % FACTS)


def test_merge_refuses_role_owned_and_resolves_aliases(tmp_path):
    tasks = [{
        "name": "Render",
        "ansible.builtin.set_fact": {"_sglang_options": _merge_task()},
        "vars": {"sglang_args": "{{ item.0 }}", "_sglang_nnodes": "{{ item.1 }}"},
        "loop": [[case[0], case[1]] for case in CASES],
        "register": "rendered",
        "ignore_errors": True,
    }, {
        "name": "Write",
        "ansible.builtin.copy": {
            "content": "{{ rendered.results | map(attribute='ansible_facts', default={'_sglang_options': none}) "
                       "| map(attribute='_sglang_options') | zip(rendered.results | map(attribute='msg', default='')) | to_json }}",
            "dest": str(tmp_path / "out.json")},
    }]
    play_vars = dict(PLAY_VARS, sglang_dist_init_host=_default("sglang_dist_init_host"))
    results = run_play(tmp_path, tasks, play_vars=play_vars)
    assert len(results) == len(CASES)
    for (args, _nnodes, expected), (options, msg) in zip(CASES, results):
        if isinstance(expected, dict):
            assert options == dict((k, v) for k, v in expected.items() if v is not None), args
        else:
            assert options is None, "%s was accepted: %s" % (args, options)
            for words in expected:
                assert words in msg, (args, msg)


def _render(tmp_path, cases, play_vars, setup=()):
    """The _sglang_options of facts.yml once per case (a dict of variables): [(options or None, msg)]."""
    tasks = list(setup) + [{
        "name": "Render",
        "ansible.builtin.set_fact": {"_sglang_options": _merge_task()},
        "vars": dict((name, "{{ item.%s }}" % name) for name in sorted(set(k for case in cases for k in case))),
        "loop": cases,
        "register": "rendered",
        "ignore_errors": True,
    }, {
        "name": "Write",
        "ansible.builtin.copy": {
            "content": "{{ rendered.results | map(attribute='ansible_facts', default={'_sglang_options': none}) "
                       "| map(attribute='_sglang_options') | zip(rendered.results | map(attribute='msg', default='')) | to_json }}",
            "dest": str(tmp_path / "out.json")},
    }]
    return run_play(tmp_path, tasks, play_vars=play_vars)


def test_checked_override_args_and_tokenizer_path(tmp_path):
    # issue 24 item 2: json-model-override-args and tokenizer-path only from the role variables, checked
    cases = [
        {"sglang_model_override_args": {"text_config": {"max_position_embeddings": 262144}}},
        {"sglang_model_override_args": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}, "rope_theta": 50000}},
        {"sglang_model_override_args": {"num_hidden_layers": 1}},
        {"sglang_model_override_args": {"text_config": {"architectures": ["LlamaForCausalLM"]}}},
        {"sglang_model_override_args": {"max_position_embeddings": "262144"}},
        {"sglang_tokenizer_path": "tokenizer"},
        {"sglang_tokenizer_path": TARGET},
        {"sglang_tokenizer_path": "../def"},
        {"sglang_tokenizer_path": "/srv/models/t/abc-evil"},
    ]
    cases = [dict({"sglang_model_override_args": {}, "sglang_tokenizer_path": ""}, **case) for case in cases]
    results = _render(tmp_path, cases, dict(PLAY_VARS, _sglang_nnodes=1, sglang_args={},
                                            sglang_dist_init_host="unused"))
    options = [opts for opts, _msg in results]
    msgs = [msg for _opts, msg in results]
    assert options[0]["json-model-override-args"] == '{"text_config": {"max_position_embeddings": 262144}}'
    assert options[1]["json-model-override-args"] == ('{"rope_scaling": {"factor": 4.0, "rope_type": "yarn"}, '
                                                      '"rope_theta": 50000}')
    assert options[2] is None and "'num_hidden_layers' cannot be overridden" in msgs[2]
    assert options[3] is None and "sglang_model_override_args.text_config: 'architectures'" in msgs[3]
    assert options[4] is None and "max_position_embeddings must be a positive integer" in msgs[4]
    assert options[5]["tokenizer-path"] == TARGET + "/tokenizer" and options[5]["model-path"] == TARGET
    assert options[6]["tokenizer-path"] == TARGET
    for index in (7, 8):
        assert options[index] is None and "outside the target's verified commit directory" in msgs[index], msgs[index]
    assert "tokenizer-path" not in options[0] and "json-model-override-args" not in options[5]


def test_dist_init_host(tmp_path):
    # issue 24 item 5: dist-init-addr is sglang_dist_init_host; by default rank 0's model_peer_address (the
    # cluster address), else its ansible_host (usually the management network), else its name
    play_vars = dict(PLAY_VARS, _sglang_nnodes=2, sglang_args={}, sglang_dist_init_host=_default("sglang_dist_init_host"))
    setup = [{"name": "Rank 0's management address", "ansible.builtin.set_fact": {"ansible_host": "10.20.1.11"}}]
    runs = {}
    for name, cases, more in (
            ("default", [{"_sglang_rank0": "rank0"}, {"_sglang_rank0": "localhost"}], []),
            ("given", [{"sglang_dist_init_host": "192.168.100.9"}, {"sglang_dist_init_host": "fd00::9"}], []),
            ("cluster", [{"_sglang_rank0": "localhost"}],
             [{"name": "Rank 0's cluster address", "ansible.builtin.set_fact": {"model_peer_address": "192.168.100.11"}}])):
        (tmp_path / name).mkdir()
        results = _render(tmp_path / name, cases, dict(play_vars, _sglang_rank0="localhost"), setup=setup + more)
        runs[name] = [opts and opts["dist-init-addr"] for opts, _msg in results]
    assert runs == {"default": ["rank0:50000", "10.20.1.11:50000"],  # an unknown host: its name; else ansible_host
                    "given": ["192.168.100.9:50000", "[fd00::9]:50000"],  # IPv6 bracketed
                    "cluster": ["192.168.100.11:50000"]}
