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

from ansible_collections.gpufleet.llm.tests.unit.plugins.filter.localplay import ROOT, run_play

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
]


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
    play_vars = {"sglang_base_args": BASE, "_sglang_target": TARGET, "_sglang_drafter": DRAFTER,
                 "_sglang_node_rank": "0", "_sglang_rank0": "rank0", "sglang_dist_init_port": 50000}
    results = run_play(tmp_path, tasks, play_vars=play_vars)
    assert len(results) == len(CASES)
    for (args, _nnodes, expected), (options, msg) in zip(CASES, results):
        if isinstance(expected, dict):
            assert options == dict((k, v) for k, v in expected.items() if v is not None), args
        else:
            assert options is None, "%s was accepted: %s" % (args, options)
            for words in expected:
                assert words in msg, (args, msg)
