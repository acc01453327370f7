# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""docs/examples/kimi-k2.6 is a config an operator can serve (issue 11 item 12).

Its group variables parse, merge through the role's gpufleet.llm.sglang_options with the role's
default sglang_base_args (so they hold no option the role owns), carry what serving Kimi K2.6 with
DFlash needs, and the two groups' option sets stay in step. test_sglang_options_sglang.py checks the
merged options against SGLang 0.5.23's parser.
"""
from __future__ import annotations

import os

import yaml

from ansible_collections.gpufleet.llm.plugins.filter.sglang_options import sglang_options

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
EXAMPLE = os.path.join(ROOT, "docs", "examples", "kimi-k2.6")
GROUPS = ("gpu_nodes", "kimi_h100_pair")
ROLE = {"model-path": "/srv/models/kimi-k2.6/abc", "speculative-algorithm": "DFLASH",
        "speculative-draft-model-path": "/srv/models/kimi-k2.6-dflash/def"}


def group_vars(group):
    with open(os.path.join(EXAMPLE, "group_vars", group + ".yml")) as handle:
        return yaml.safe_load(handle)


def base_args():
    with open(os.path.join(ROOT, "roles", "sglang", "defaults", "main.yml")) as handle:
        return yaml.safe_load(handle)["sglang_base_args"]


def merged(group):
    return sglang_options(base_args(), group_vars(group)["sglang_args"], ROLE)


def test_example_merges_and_serves_kimi():
    for group in GROUPS:
        options = merged(group)  # raises on a role-owned option or two spellings
        assert options["tool-call-parser"] == "kimi_k2", group
        assert options["reasoning-parser"] == "kimi_k2", group
        assert options["served-model-name"] == "kimi-k2.6", group
        assert ":" not in options["served-model-name"]  # SGLang's validation_hook refuses a colon
        assert isinstance(options["max-running-requests"], int), group
        assert options["enable-metrics"] is True, group
        assert options["host"] == "127.0.0.1", group  # README.md: how to expose it safely
        assert options["model-path"] == ROLE["model-path"], group


def test_example_environment():
    for group in GROUPS:
        env = group_vars(group)["sglang_environment"]
        assert env["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] == "1", group
        assert all(isinstance(value, str) for value in env.values()), group  # an EnvironmentFile holds strings


def test_pair_keeps_nccl_and_gloo_on_the_fabric():
    # issue 24 item 5: NCCL_SOCKET_IFNAME alone leaves torch's Gloo groups on the host name's interface
    env = group_vars("kimi_h100_pair")["sglang_environment"]
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "ib0"
    with open(os.path.join(EXAMPLE, "inventory.ini")) as handle:
        hosts = [line.split() for line in handle if line.startswith("h100-b")]
    # rank 0's cluster address (dist-init-addr by default) is not its management address
    fields = dict(item.split("=", 1) for item in hosts[0][1:])
    assert fields["model_peer_address"] != fields["ansible_host"]
    with open(os.path.join(EXAMPLE, "README.md")) as handle:
        text = handle.read()
    for words in ("GLOO_SOCKET_IFNAME", "sglang_dist_init_host", "50001-50006"):
        assert words in text, words


def test_groups_in_step():
    # group variables replace, they do not merge: the pair must repeat every option but its tp
    single, pair = merged("gpu_nodes"), merged("kimi_h100_pair")
    assert (single["tp-size"], pair["tp-size"]) == (8, 16)
    assert dict(single, **{"tp-size": 16}) == pair
    env_single, env_pair = group_vars("gpu_nodes")["sglang_environment"], group_vars("kimi_h100_pair")["sglang_environment"]
    assert dict(env_pair, **env_single) == env_pair


def test_readme_documents_exposure_and_metrics():
    with open(os.path.join(EXAMPLE, "README.md")) as handle:
        text = handle.read()
    for words in ("127.0.0.1", "reverse proxy", "firewall", "/metrics", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
                  "served-model-name", "max-running-requests"):
        assert words in text, words
