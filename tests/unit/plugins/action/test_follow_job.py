# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""follow_job's poll schedule: soon at first, then every ``interval`` (a pure function; the loop itself
is driven end to end by the hf_snapshot integration target's 300-poll scenario)."""
from __future__ import annotations

from ansible_collections.gpufleet.llm.plugins.action import follow_job


def test_first_polls_come_soon_then_every_interval():
    waits = [follow_job.wait_before(poll, 20.0) for poll in range(1, 10)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0, 20.0]
    # a job that ends at once is seen at the first poll after 0.5 s, not after a whole 20 s interval
    assert sum(waits[:2]) < 2


def test_a_short_interval_is_never_stretched_and_many_polls_do_not_overflow():
    assert [follow_job.wait_before(poll, 0.05) for poll in (1, 2, 300)] == [0.05, 0.05, 0.05]
    assert follow_job.wait_before(10 ** 6, 30.0) == 30.0
