# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 23: the fleet simulation (fixtures/fleet_sim.py: the real PeerSource, PeerBook, batches and
shares over a simulated transport, in virtual time) at small N, asserting the invariants; the bench
(tests/lab/bench_scale.py, make bench) runs the same at 16-256 hosts for the figures. Driven by the
simulation's own events and virtual clock, never by wall-clock time."""
from __future__ import annotations

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peerbook as _peerbook
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import fleet_sim

GB = 10 ** 9
LINK = 12.5 * GB


def _fleet(n, **faults):
    fleet = fleet_sim.Fleet(n, fleet_sim.kimi_files(GB // 4), link=LINK, hub_uplink=4 * LINK, tick=0.05, **faults)
    fleet.run(limit=3600)
    return fleet, fleet.figures()


@pytest.mark.parametrize("n", [4, 24])
def test_every_host_completes_from_about_one_hub_copy_with_flat_control_traffic(n):
    fleet, fig = _fleet(n)
    assert fig["completed"] == n and fig["bad_landed"] == 0 and fig["dropped"] == 0
    assert fig["hub_bytes_over_copy"] <= 1.1
    # a look reads at most STATUS_READS status files, whatever the number of peers and files
    assert fig["control_requests_per_host_per_round_max"] <= _peerbook.STATUS_READS
    assert all(host.held == dict(fleet.files) for host in fleet.hosts.values())  # each lists all it holds


def test_hung_and_corrupt_peers_cost_time_not_correctness():
    """24 hosts, 2 hung (their servers accept and never answer) and 2 corrupt (every byte they serve
    fails the hash): every host completes, no file a corrupt peer sent bytes of is placed, each hung
    peer is read once per host at most (dropped at its first timeout), and the corrupt ones are dropped."""
    fleet, fig = _fleet(24, hung=2 / 24, corrupt=2 / 24)
    assert fig["hung"] == 2 and fig["corrupt"] == 2
    assert fig["completed"] == 24 and fig["bad_landed"] == 0
    # a hung owner's files come from the Hub once, through their heir, not once per host that needs them
    assert fig["hub_bytes_over_copy"] <= 1.25
    hung = {h.name for h in fleet.hosts.values() if h.hung}
    corrupt = {h.name for h in fleet.hosts.values() if h.corrupt}
    for host in fleet.hosts.values():
        dropped = {d["name"] for d in host.source.dropped()}
        assert hung - {host.name} <= dropped  # every host found each hung peer out
        assert not dropped - hung - corrupt  # and dropped no honest peer
        assert host.hung_reads <= len(hung)


def test_aria2_runs_parallel_files_of_a_batch_at_once_and_weighs_connections_per_source():
    """The simulated aria2: a peer batch of PEER_BATCH_SCALE x parallel_files large files runs parallel_files
    at a time (--max-concurrent-downloads); a download weighs splits / k connections at each of its k sources."""
    fleet = fleet_sim.Fleet(2, fleet_sim.kimi_files(GB // 4), link=LINK, hub_uplink=4 * LINK, tick=0.05)
    host = fleet.hosts["gpu1"]
    item = fleet_sim._Item("model-00001-of-000064.safetensors", GB // 4)
    dls = [fleet._start(host, item, fleet_sim.Resolution("https://hub/x")) for dummy in range(9)]
    host.queued = list(dls)
    fleet._admit(host)
    assert host.active == fleet.parallel_files == 6 and len(host.queued) == 3 and fleet.downloads == dls[:6]
    one = fleet._start(host, item, fleet_sim.Resolution("http://gpu2:8370/m/c/x"))
    two = fleet._start(host, item, fleet_sim.Resolution("http://gpu2:8370/m/c/x", mirrors=("https://hub/x",)))
    assert one.weight == fleet.splits and two.weight == fleet.splits / 2
