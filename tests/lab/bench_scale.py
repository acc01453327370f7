# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark: the peer exchange at 16, 64 and 256 hosts, simulated (make bench, stage bench-scale).

Runs tests/unit/plugins/module_utils/fixtures/fleet_sim.py (the collection's own PeerSource / PeerBook / next_batch / shares,
the lanes of rounds.Round, with a
simulated transport and a virtual clock; its docstring says what is left out) on Kimi K2.6's shape:
64 shards of 9.2 GB plus 16 small files (589 GB). Host links 100 Gb/s down and up; the Hub side at
4 host links (a site mirror; the acceptance runs) or at 10 Gb/s (the prediction for a site uplink, at 64
hosts: the uplink sets the makespan there, and 256 hosts polling through ~470 s of virtual time take the
simulation over 8 minutes).
No lab needed: pure Python; each 256-host run takes minutes (2.5-5 here; 13-27 for the whole stage). Results: bench-results/scale.json, scale.md and
scale.png (makespan and control requests against N).

Acceptance (issue 23), 256 hosts against 16: control requests per host per round <= 1.5 x; Hub bytes
<= 1.1 copies; makespan <= 1.5 x size / link; the busiest peer <= 2 x the mean bytes served; with 5%
hung or 5% corrupt peers every host completes with nothing bad landed, and with 5% hung peers Hub bytes <= 1.1 copies (their heirs).
The "-hash" runs (16-256 hosts) add each file's hash time (HASH_RATE), which the acceptance runs leave out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

GB = 1e9
LINK = 100e9 / 8  # bytes/s of one host's NIC, each way
SHARD = int(9.2 * GB)
# sha256 of one file on one core, bytes/s (hashlib here: 1.81 GB/s; a 9.2 GB shard takes ~5 s). The "-hash" runs
# place and publish a file only once its hash is done, as the module does; the acceptance runs hash at once,
# as issue 23's simulation was specified (its transport, not the hosts' CPUs), and as every earlier figure did.
HASH_RATE = 1.8e9
# (label, hosts, Hub uplink in host links, hung share, corrupt share, tick s[, hash bytes/s])
RUNS = [
    ("n16", 16, 4.0, 0.0, 0.0, 0.2),
    ("n64", 64, 4.0, 0.0, 0.0, 0.2),
    ("n256", 256, 4.0, 0.0, 0.0, 0.2),
    ("n256-hung5", 256, 4.0, 0.05, 0.0, 0.2),
    ("n256-corrupt5", 256, 4.0, 0.0, 0.05, 0.2),
    # the site-uplink prediction at 64 hosts: at 256 the Hub phase (~470 s of virtual time with every host
    # polling) took the simulation over 8 minutes of wall time; the uplink, not N, sets the makespan there
    ("kimi-100g-10g-n64", 64, 0.1, 0.0, 0.0, 1.0),
    # the same fleets with each file's hash taking its time (HASH_RATE): what the acceptance runs leave out
    ("n16-hash", 16, 4.0, 0.0, 0.0, 0.2, HASH_RATE),
    ("n64-hash", 64, 4.0, 0.0, 0.0, 0.2, HASH_RATE),
    ("n256-hash", 256, 4.0, 0.0, 0.0, 0.2, HASH_RATE),
]


def _import_sim(collections):
    """The simulation (the unit tests' fixtures/fleet_sim.py, which also runs it at small N), imported as
    part of the collection from ``collections`` (a collections path whose gpufleet/llm is this checkout:
    the stage's link_collection)."""
    sys.path.insert(0, str(collections))
    from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import fleet_sim  # pylint: disable=import-outside-toplevel
    if not Path(fleet_sim.__file__).resolve().is_relative_to(REPO):
        raise SystemExit("%s/ansible_collections/gpufleet/llm is not this checkout (%s)" % (collections, REPO))
    return fleet_sim


def run_one(sim, label, hosts, hub, hung, corrupt, tick, hash_rate=None):
    t0 = time.monotonic()
    fleet = sim.Fleet(hosts, sim.kimi_files(SHARD), link=LINK, hub_uplink=hub * LINK, hung=hung, corrupt=corrupt, tick=tick,
                      hash_rate=hash_rate)
    fleet.run(limit=20000)
    out = fleet.figures()
    out.update(label=label, hub_uplink_over_link=hub, hash_bytes_per_s=hash_rate, model_bytes=fleet.size, link_bytes_per_s=LINK,
               size_per_link_s=round(fleet.size / LINK, 1), wall_s=round(time.monotonic() - t0, 1))
    print("%-14s %s" % (label, json.dumps(out)), flush=True)
    return out


def acceptance(runs):
    by = {r["label"]: r for r in runs}
    base, big = by.get("n16"), by.get("n256")
    if not base or not big:
        return {}
    ratio = big["control_requests_per_host_per_round"] / base["control_requests_per_host_per_round"]
    faults = [by[k] for k in ("n256-hung5", "n256-corrupt5") if k in by]
    hung_hub = by.get("n256-hung5", {}).get("hub_bytes_over_copy")
    return {
        "control_256_over_16": {"value": round(ratio, 3), "goal": "<= 1.5", "met": ratio <= 1.5},
        "hub_bytes_over_copy_256": {"value": big["hub_bytes_over_copy"], "goal": "<= 1.1", "met": big["hub_bytes_over_copy"] <= 1.1},
        "makespan_over_size_per_link_256": {"value": big["makespan_over_size_per_link"], "goal": "<= 1.5",
                                            "met": big["makespan_over_size_per_link"] <= 1.5},
        "max_bytes_served_over_mean_256": {"value": big["max_bytes_served_over_mean"], "goal": "<= 2",
                                           "met": big["max_bytes_served_over_mean"] <= 2},
        # issue 23's follow-up: a hung owner's files come from the Hub once (their heir), not once per host
        "hub_bytes_over_copy_256_hung5": {"value": hung_hub, "goal": "<= 1.1", "met": hung_hub is not None and hung_hub <= 1.1},
        "faults_complete_nothing_bad": {"value": [(r["label"], r["completed"], r["bad_landed"]) for r in faults],
                                        "goal": "every host completes, 0 bad", "met": all(
                                            r["completed"] == r["hosts"] and r["bad_landed"] == 0 for r in faults)},
    }


def markdown(doc):
    lines = ["# bench-scale: the peer exchange at 16-256 hosts (simulated, issue 23)", "",
             "Kimi K2.6's shape (64 x 9.2 GB shards + 16 small files), host links 100 Gb/s; the collection's own",
             "PeerSource/PeerBook with a simulated transport and virtual time (tests/unit/plugins/module_utils/fixtures/fleet_sim.py).", "",
             "| run | hosts | Hub uplink / link | hash GB/s | control req / host / round | rounds / host | Hub bytes / copy | "
             "makespan s | makespan / (size/link) | max served / mean | completed | bad landed | drops |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["runs"]:
        rate = r.get("hash_bytes_per_s")
        lines.append("| %s | %d | %.1f | %s | %.2f | %.1f | %.3f | %.1f | %.3f | %.3f | %d | %d | %d |" % (
            r["label"], r["hosts"], r["hub_uplink_over_link"], "%.1f" % (rate / GB) if rate else "-",
            r["control_requests_per_host_per_round"], r["rounds_per_host"],
            r["hub_bytes_over_copy"], r["makespan_s"], r["makespan_over_size_per_link"], r["max_bytes_served_over_mean"],
            r["completed"], r["bad_landed"], r["dropped"]))
    lines += ["", "## Acceptance (256 hosts; control traffic against 16)", "", "| goal | value | target | met |", "|---|---|---|---|"]
    for name, a in doc["acceptance"].items():
        lines.append("| %s | %s | %s | %s |" % (name, a["value"], a["goal"], "yes" if a["met"] else "NO"))
    lines += ["", "![makespan and control requests against N](scale.png)", ""]
    return "\n".join(lines)


def plot(doc, path):
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
        matplotlib.use("Agg")
        from matplotlib import pyplot  # pylint: disable=import-outside-toplevel
    except ImportError:
        return False
    runs = [r for r in doc["runs"] if r["label"] in ("n16", "n64", "n256")]
    hashed = [r for r in doc["runs"] if r["label"] in ("n16-hash", "n64-hash", "n256-hash")]
    xs = [r["hosts"] for r in runs]
    fig, left = pyplot.subplots(figsize=(8, 5), dpi=100)
    left.plot(xs, [r["makespan_over_size_per_link"] for r in runs], "o-", label="makespan / (size/link)")
    if hashed:
        left.plot([r["hosts"] for r in hashed], [r["makespan_over_size_per_link"] for r in hashed], "o:",
                  label="the same, each file's hash at %.1f GB/s" % (HASH_RATE / GB))
    left.set_xscale("log", base=2)
    left.set_xlabel("hosts")
    left.set_ylabel("makespan / (size / link)")
    right = left.twinx()
    right.plot(xs, [r["control_requests_per_host_per_round"] for r in runs], "s--", color="tab:red",
               label="control requests / host / round")
    right.set_ylabel("control requests / host / round")
    right.set_ylim(bottom=0)
    left.set_ylim(bottom=0)
    fig.legend(loc="lower right")
    left.set_title("peer exchange, simulated: Kimi K2.6 shape, 100 Gb/s hosts, Hub at 4 links")
    fig.tight_layout()
    fig.savefig(str(path))
    pyplot.close(fig)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "bench-results"))
    parser.add_argument("--only", nargs="*", help="run labels (default: all)")
    parser.add_argument("--collections", required=True, help="a collections path whose gpufleet/llm is this checkout")
    args = parser.parse_args(argv)
    sim = _import_sim(args.collections)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for spec in RUNS:
        if not args.only or spec[0] in args.only:
            runs.append(run_one(sim, *spec))
            # after each run: an interrupted bench keeps what it measured
            (out / "scale.json").write_text(json.dumps({"runs": runs, "acceptance": acceptance(runs)}, indent=2) + "\n")
    doc = {"runs": runs, "acceptance": acceptance(runs)}
    plotted = plot(doc, out / "scale.png")
    (out / "scale.md").write_text(markdown(doc) if plotted else markdown(doc).replace("![makespan", "(no matplotlib: no plot) ![makespan"))
    print("wrote %s (scale.json, scale.md%s)" % (out, ", scale.png" if plotted else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
