# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.llm.rollout_plan, rollout_summary, rollout_lineup, rollout_serial and rank_groups: thin wrappers of _rollout (its rules are
tested in tests/unit/plugins/module_utils/test_rollout.py); bad input is an AnsibleFilterError naming
the problem, never a traceback."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.llm.plugins.filter.rank_groups import FilterModule as RankFilters, rank_groups
from ansible_collections.gpufleet.llm.plugins.filter.rollout_lineup import FilterModule as LineupFilters, rollout_lineup
from ansible_collections.gpufleet.llm.plugins.filter.rollout_serial import FilterModule as SerialFilters, rollout_serial
from ansible_collections.gpufleet.llm.plugins.filter.rollout_plan import FilterModule as PlanFilters, rollout_plan
from ansible_collections.gpufleet.llm.plugins.filter.rollout_summary import FilterModule as SummaryFilters, rollout_summary


def _host(name, *, ranks=None, staged=True):
    return {"name": name, "ranks": ranks or [], "staged": staged}


def test_the_filters_are_registered_under_their_names():
    assert PlanFilters().filters()["rollout_plan"] is rollout_plan
    assert SummaryFilters().filters()["rollout_summary"] is rollout_summary
    assert rollout_plan([_host("gpu1"), _host("gpu2")], 1)["batches"] == [["gpu1"], ["gpu2"]]
    assert rollout_summary([["gpu1"]], {"gpu1": {"staged": True, "rolled": True}})["ok"]


def test_plan_refuses_bad_input_with_a_message():
    with pytest.raises(AnsibleFilterError, match="gpufleet_serial must be a whole number"):
        rollout_plan([_host("gpu1")], "two")
    with pytest.raises(AnsibleFilterError, match="each host needs a name"):
        rollout_plan([{"staged": True}], 1)
    with pytest.raises(AnsibleFilterError, match="expected a list of hosts"):
        rollout_plan({"gpu1": {}}, 1)


def test_summary_refuses_bad_input_with_a_message():
    with pytest.raises(AnsibleFilterError, match="needs the servers"):
        rollout_summary({"gpu1": []}, {})


def test_the_batch_filters_are_registered_under_their_names():
    assert LineupFilters().filters()["rollout_lineup"] is rollout_lineup
    assert SerialFilters().filters()["rollout_serial"] is rollout_serial
    assert RankFilters().filters()["rank_groups"] is rank_groups
    line = rollout_lineup([["gpu1"], ["gpu2"]], "gpufleet-roll-batch")
    assert [row["name"] for row in line] == ["gpufleet-roll-batch-1", "gpu1", "gpufleet-roll-batch-2", "gpu2"]
    assert rollout_serial(line, ["gpu1", "gpu2", "gpufleet-roll-batch-2"]) == [1, 2]
    assert rank_groups(["gpu2", "gpu1"], {"mn": ["gpu1", "gpu2"]}, "mn") == [["gpu1", "gpu2"]]
    # the plan from servers and the hosts that staged
    assert rollout_plan([["gpu1"], ["gpu2", "gpu3"]], 1, staged=["gpu1", "gpu2", "gpu3"])["batches"] == [["gpu1"], ["gpu2", "gpu3"]]


def test_the_batch_filters_refuse_bad_input_with_a_message():
    with pytest.raises(AnsibleFilterError, match="rollout_lineup: the batches must be a list of host lists"):
        rollout_lineup("gpu1", "m")
    with pytest.raises(AnsibleFilterError, match="rollout_serial: each host of the lineup needs a name and a batch number"):
        rollout_serial([{"name": "gpu1"}], [])
    with pytest.raises(AnsibleFilterError, match="rank_groups: host gpu1 is not in its multi-node group mn"):
        rank_groups(["gpu1"], {"mn": ["gpu2"]}, "mn")
    with pytest.raises(AnsibleFilterError, match="rank_groups: the hosts must be a list of host names"):
        rank_groups("gpu1", {}, "")
    with pytest.raises(AnsibleFilterError, match="rollout_plan: each server must be a list of its ranks"):
        rollout_plan(["gpu1"], 1, staged=[])
