# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.llm.rollout_plan and gpufleet.llm.rollout_summary: thin wrappers of _rollout (its rules are
tested in tests/unit/plugins/module_utils/test_rollout.py); bad input is an AnsibleFilterError naming
the problem, never a traceback."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

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
