# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/deploy.yml's roll decisions (issue 12 items 1 and 4): which servers roll in which batch
(never one whose stage failed on any rank, the ranks of a server in one batch) and the summary of
what moved and what stayed on the old revision, and why. The filters that wrap these are tested in
tests/unit/plugins/filter/test_rollout_filters.py (module_utils tests run without ansible)."""
from __future__ import annotations

from ansible_collections.gpufleet.llm.plugins.module_utils import _rollout


def _host(name, *, ranks=None, staged=True):
    return {"name": name, "ranks": ranks or [], "staged": staged}


def test_single_node_servers_in_batches_of_n():
    hosts = [_host("gpu%d" % i) for i in range(1, 6)]
    assert _rollout.plan(hosts, per_batch=2)["batches"] == [["gpu1", "gpu2"], ["gpu3", "gpu4"], ["gpu5"]]
    assert _rollout.plan(hosts, per_batch=0)["batches"] == [["gpu%d" % i] for i in range(1, 6)]


def test_ranks_of_a_server_share_a_batch_and_count_as_one():
    mn = ["gpu2", "gpu3"]
    hosts = [_host("gpu1"), _host("gpu2", ranks=mn), _host("gpu3", ranks=mn), _host("gpu4")]
    result = _rollout.plan(hosts, per_batch=1)
    assert result["batches"] == [["gpu1"], ["gpu2", "gpu3"], ["gpu4"]]
    assert [s["ranks"] for s in result["servers"]] == [["gpu1"], ["gpu2", "gpu3"], ["gpu4"]]
    assert result["left_out"] == []


def test_a_server_whose_stage_failed_on_one_rank_is_left_out_with_its_other_ranks():
    mn = ["gpu2", "gpu3"]
    hosts = [_host("gpu1"), _host("gpu2", ranks=mn), _host("gpu3", ranks=mn, staged=False), _host("gpu4", staged=False)]
    result = _rollout.plan(hosts, per_batch=1)
    assert result["batches"] == [["gpu1"]]
    assert result["servers"][1] == {"ranks": mn, "staged": False, "not_staged": ["gpu3"]}
    assert len(result["left_out"]) == 2
    assert "not staged on gpu3" in result["left_out"][0] and "gpu2 left out of the roll with it" in result["left_out"][0]
    assert "gpu4: not staged on gpu4" in result["left_out"][1] and "left out" not in result["left_out"][1]


def test_summary_after_a_failure_in_batch_1():
    flags = {
        "gpu1": {"staged": True, "started": True, "rolled_back": True},
        "gpu2": {"staged": True, "halted": True},
        "gpu3": {"staged": False},
    }
    result = _rollout.summary([["gpu1"], ["gpu2"], ["gpu3"]], flags)
    assert not result["ok"] and result["moved"] == []
    assert result["lines"] == [
        "stayed on the old revision: gpu1 (its batch failed on gpu1 (rolled back to the previous config on gpu1))",
        "stayed on the old revision: gpu2 (halted after an earlier failure (its batch did not start))",
        "stayed on the old revision: gpu3 (stage failed on gpu3)",
    ]


def test_summary_of_a_good_roll_and_of_a_multi_node_server():
    commit = "9a0e962393e4de9175c7df68f4731837f10a644a"
    flags = {
        "gpu1": {"staged": True, "started": True, "rolled": True, "commits": {"kimi": commit}},
        "gpu2": {"staged": True, "started": True, "rolled": True},
        "gpu3": {"staged": True, "started": True},
        "gpu4": {"staged": True},
    }
    result = _rollout.summary([["gpu1"], ["gpu2", "gpu3"], ["gpu4"]], flags)
    assert result["moved"] == [{"server": "gpu1", "ranks": ["gpu1"], "commits": {"kimi": commit}}]
    assert result["lines"][0] == "moved: gpu1 -> kimi@9a0e962393e4"
    # a rank that did not finish fails the whole server; a server whose batch never came says so
    assert result["stayed"][0]["why"] == "its batch failed on gpu3"
    assert result["stayed"][1]["why"] == "not rolled: the run ended before its batch"
    assert _rollout.summary([["gpu1"]], {"gpu1": flags["gpu1"]})["ok"]
