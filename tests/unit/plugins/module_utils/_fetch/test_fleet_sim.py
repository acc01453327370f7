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


def test_lanes_keep_parallel_files_large_downloads_going_and_aria2_weighs_connections_per_source():
    """The simulated round (rounds.Round._run_lanes): a host never runs more than parallel_files large
    downloads at once, and fills its slots (a lane per resolve, a free slot filled as soon as one frees);
    a download weighs splits / k connections at each of its k sources."""
    fleet = fleet_sim.Fleet(8, fleet_sim.kimi_files(GB // 4), link=LINK, hub_uplink=4 * LINK, tick=0.05)
    begin = fleet._begin
    most = {}

    def counting(host, started):
        begin(host, started)
        large = sum(1 for dl in fleet.downloads if dl.host is host and dl.item.remote.size > GB // 8)
        assert large <= fleet.parallel_files
        most[host.name] = max(most.get(host.name, 0), large)

    fleet._begin = counting
    fleet.run(limit=3600)
    assert fleet.figures()["completed"] == 8
    assert set(most.values()) == {fleet.parallel_files}  # every host had all its slots busy at some point
    host = fleet.hosts["gpu1"]
    item = fleet_sim._Item("model-00001-of-000064.safetensors", GB // 4)
    one = fleet._start(host, item, fleet_sim.Resolution("http://gpu2:8370/m/c/x"))
    two = fleet._start(host, item, fleet_sim.Resolution("http://gpu2:8370/m/c/x", mirrors=("https://hub/x",)))
    assert one.weight == fleet.splits and two.weight == fleet.splits / 2


def test_with_a_hash_rate_a_file_is_published_only_once_its_hash_is_done():
    """rounds.Round places and publishes a file once its hash matched, seconds after aria2 completed it for a
    9.2 GB shard: with ``hash_rate`` the simulation does too (a shard of GB / 4 at GB / 4 per second: one
    second of virtual time), and the lane's slot is free meanwhile."""
    fleet = fleet_sim.Fleet(4, fleet_sim.kimi_files(GB // 4), link=LINK, hub_uplink=4 * LINK, tick=0.05, hash_rate=GB / 4)
    completed, lags = {}, []
    complete = fleet._complete

    def completing(dl):
        completed[(dl.host.name, dl.item.key)] = fleet.now
        complete(dl)

    fleet._complete = completing
    for host in fleet.hosts.values():
        def placed(item, host=host, real=host.source.placed):
            if item.remote.size == GB // 4:
                lags.append(fleet.now - completed[(host.name, item.key)])
            real(item)
        host.source.placed = placed
    fleet.run(limit=3600)
    fig = fleet.figures()
    assert fig["completed"] == 4 and fig["bad_landed"] == 0
    assert len(lags) == 4 * 64 and min(lags) >= 1.0 - 1e-6 and max(lags) <= 1.0 + fleet.tick + 1e-6
    dummy, at_once = _fleet(4)  # the same fleet, each hash done at once
    assert fig["makespan_s"] > at_once["makespan_s"]
