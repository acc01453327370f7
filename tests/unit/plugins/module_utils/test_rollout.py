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


# The batch lineup, its sizes against --limit and the rank grouping (issue 21 item 4): stage.yml and
# deploy.yml call these through gpufleet.llm.rollout_lineup / rollout_serial / rank_groups.

def test_lineup_opens_each_batch_with_its_marker():
    assert _rollout.lineup([["gpu1"], ["gpu2", "gpu3"]], "gpufleet-roll-batch") == [
        {"name": "gpufleet-roll-batch-1", "marker": True, "batch": 1},
        {"name": "gpu1", "marker": False, "batch": 1},
        {"name": "gpufleet-roll-batch-2", "marker": True, "batch": 2},
        {"name": "gpu2", "marker": False, "batch": 2},
        {"name": "gpu3", "marker": False, "batch": 2},
    ]


def test_lineup_without_a_batch_still_holds_the_first_marker():
    # issue 21 item 5(a): an empty roll group ends a run under host_pattern_mismatch=error
    assert _rollout.lineup([], "gpufleet-roll-batch") == [{"name": "gpufleet-roll-batch-1", "marker": True, "batch": 1}]


def test_lineup_refuses_what_the_playbook_never_builds():
    for batches, prefix, message in ((["gpu1"], "p", "batch 1 must be a list"), ("gpu1", "p", "must be a list of host lists"),
                                     ([["gpu1"]], "", "need a name prefix")):
        try:
            _rollout.lineup(batches, prefix)
        except _rollout.RolloutError as exc:
            assert message in str(exc)
        else:
            raise AssertionError("accepted %r" % (batches,))


def test_serial_counts_a_marker_only_when_the_limit_admits_it():
    line = _rollout.lineup([["gpu1"], ["gpu2", "gpu3"], ["gpu4"]], "m")
    everything = [row["name"] for row in line]
    assert _rollout.serial(line, everything) == [2, 3, 2]
    # --limit gpu1,gpu2,gpu3,gpu4,localhost: no marker in the play
    assert _rollout.serial(line, ["gpu1", "gpu2", "gpu3", "gpu4", "localhost"]) == [1, 2, 1]
    # the first marker named alone
    assert _rollout.serial(line, ["m-1", "gpu1", "gpu2", "gpu3", "gpu4"]) == [2, 2, 1]
    # the lineup of no batch: its marker, when admitted
    assert _rollout.serial(_rollout.lineup([], "m"), ["m-1"]) == [1]
    assert _rollout.serial(_rollout.lineup([], "m"), []) == [0]


def test_serial_refuses_a_lineup_without_batch_numbers():
    for hosts, in_limit, message in (([{"name": "gpu1"}], [], "needs a name and a batch number"), ([], "gpu1", "must be a list")):
        try:
            _rollout.serial(hosts, in_limit)
        except _rollout.RolloutError as exc:
            assert message in str(exc)
        else:
            raise AssertionError("accepted %r" % (hosts,))


def test_rank_groups_makes_servers_of_the_multinode_groups():
    groups = {"all": ["gpu1", "gpu2", "gpu3", "gpu4"], "mn": ["gpu3", "gpu2"]}
    multinode = {"gpu2": "mn", "gpu3": "mn"}
    assert _rollout.rank_groups(["gpu4", "gpu3", "gpu1", "gpu2"], groups, multinode) == [["gpu1"], ["gpu2", "gpu3"], ["gpu4"]]
    # within: the ranks in the play only (a --limit on gpu2 keeps gpu3 out of its server's ranks)
    assert _rollout.rank_groups(["gpu1", "gpu2"], groups, multinode, within=["gpu1", "gpu2"]) == [["gpu1"], ["gpu2"]]
    # one group name for every host (the sglang role's own host), an empty one, one that is no group
    assert _rollout.rank_groups(["gpu3"], groups, "mn") == [["gpu2", "gpu3"]]
    assert _rollout.rank_groups(["gpu3"], groups, "") == [["gpu3"]]
    assert _rollout.rank_groups(["gpu3"], groups, "nosuchgroup") == [["gpu3"]]


def test_rank_groups_refuses_a_host_outside_its_own_group():
    try:
        _rollout.rank_groups(["gpu1"], {"mn": ["gpu2", "gpu3"]}, {"gpu1": "mn"})
    except _rollout.RolloutError as exc:
        assert "host gpu1 is not in its multi-node group mn (gpu2, gpu3)" in str(exc)
    else:
        raise AssertionError("a host outside its group was accepted")


def test_a_plan_from_servers_is_the_plan_from_hosts():
    servers = [["gpu1"], ["gpu2", "gpu3"], ["gpu4"]]
    hosts = _rollout.hosts_of(servers, ["gpu1", "gpu2", "gpu4"])
    assert hosts[1] == {"name": "gpu2", "ranks": ["gpu2", "gpu3"], "staged": True}
    result = _rollout.plan(hosts, per_batch=1)
    assert result["batches"] == [["gpu1"], ["gpu4"]]
    assert "gpu2, gpu3: not staged on gpu3" in result["left_out"][0]
