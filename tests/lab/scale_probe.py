# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where bench-scale's makespan goes: one simulated run (fleet_sim, the bench's setup), instrumented.

Prints the run's figures, the hosts' finish times (first, median, 90th percentile, last), the fleet's
downlink use and the Hub's use in windows of virtual time, and the peer downloads of large files by their
number of mirrors (count, mean and worst duration, holders of the file when it completed). The figures of
docs/fleet.md's "Tried after that" list came from it. Measures only: it changes no scheduling.

    python tests/lab/scale_probe.py --collections /tmp/coll 64
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

GB = 1e9
LINK = 100e9 / 8
SHARD = int(9.2 * GB)


def _instrument(fleet, hub_links):
    """Wraps the fleet's network so each tick records (time, fleet downlink use, Hub use), and each peer
    download of a large file its (mirrors, seconds, holders at its end)."""
    series, downloads, started = [], [], {}
    begin, flow = fleet._begin, fleet._flow  # pylint: disable=protected-access

    def _begin(host, dls):
        begin(host, dls)
        for dl in dls:
            started[id(dl)] = fleet.now

    def _flow(dt):
        rates = fleet._rates()  # pylint: disable=protected-access
        total = sum(sum(r.values()) for r in rates)
        hub = sum(r.get("hub", 0.0) for r in rates)
        series.append((fleet.now, total / (len(fleet.hosts) * LINK), hub / (hub_links * LINK)))
        flow(dt)
        for dl in fleet.downloads:
            if dl.left <= 1e-6 and id(dl) in started and dl.sources[0] != "hub" and dl.item.remote.size > 1e8:
                holders = sum(1 for h in fleet.hosts.values() if dl.item.remote.path in h.held)
                downloads.append((len(dl.sources), fleet.now + dt - started.pop(id(dl)), holders))

    fleet._begin, fleet._flow = _begin, _flow  # pylint: disable=protected-access
    return series, downloads


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hosts", type=int)
    parser.add_argument("--collections", required=True, help="a collections path whose gpufleet/llm is this checkout")
    parser.add_argument("--hub", type=float, default=4.0, help="the Hub's uplink in host links (bench: 4)")
    parser.add_argument("--window", type=float, default=2.0, help="seconds of virtual time per line")
    args = parser.parse_args(argv)
    sys.path.insert(0, args.collections)
    from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import fleet_sim  # pylint: disable=import-outside-toplevel
    fleet = fleet_sim.Fleet(args.hosts, fleet_sim.kimi_files(SHARD), link=LINK, hub_uplink=args.hub * LINK, tick=0.2)
    series, downloads = _instrument(fleet, args.hub)
    fleet.run(limit=20000)
    print(json.dumps(fleet.figures()))
    done = sorted(h.finished for h in fleet.hosts.values())
    print("finished: first %.1f s, median %.1f s, p90 %.1f s, last %.1f s" % (
        done[0], done[len(done) // 2], done[int(len(done) * 0.9)], done[-1]))
    windows = {}
    for now, down, hub in series:
        windows.setdefault(int(now // args.window), []).append((down, hub))
    for index in sorted(windows):
        rows = windows[index]
        print("t=%5.0f s  fleet downlinks %3.0f%%  Hub %3.0f%%" % (
            index * args.window, 100 * statistics.mean(r[0] for r in rows), 100 * statistics.mean(r[1] for r in rows)))
    for low, high in ((1, 1), (2, 3), (4, 7), (8, 15), (16, 999)):
        rows = [d for d in downloads if low <= d[0] <= high]
        if rows:
            print("%2d-%3d mirrors: %5d downloads, mean %.1f s, worst %.1f s, holders at the end %.0f" % (
                low, high, len(rows), statistics.mean(d[1] for d in rows), max(d[1] for d in rows),
                statistics.mean(d[2] for d in rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
