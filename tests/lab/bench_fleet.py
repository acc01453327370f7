"""Benchmark: staging one host vs four, `hub` vs `peers` (make bench, stage bench-fleet).

playbooks/stage.yml stages the Kimi-shaped fixture and its drafter (~28 MB) from a PRIVATE lab Hub
(tests/lab/hub/server.py on its own bridge address, like the fleet integration target) into a fresh
models root, on 1 host and on 4 hosts, with model_distribution hub and peers:

  - capped: the Hub's total rate capped (CAP_TOTAL, a site uplink), so the Hub is the bottleneck.
    Goals: peers on 4 hosts <= 1.5 x the wall time of 1 host, and <= 1.1 x its Hub bytes.
  - uncapped: hub mode with the Hub not the bottleneck. Goal: 4 hosts well under 4 x the 1-host time
    (staging runs on all hosts at once, not one after another).

Wall time = the whole ansible-playbook run on the controller (preflight, pin, peer servers, fetch,
verify); Hub bytes = file bytes in the private Hub's request log (not the modules' reports). One
warm-up stage (not measured) installs the tools and warms caches. All figures come from one run, side
by side: compare the ratios, not figures across runs (the machine is shared). Results go to
bench-results/fleet.json and fleet.md.

Needs the lab up with 4 hosts; --inventory picks them (default: the lab's own inventory, first 4
hosts of gpu_nodes).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "integration" / "targets" / "fleet"))

import bench  # noqa: E402
import fixtures  # noqa: E402
import fleet_lab  # noqa: E402  (the fleet target's private Hub and log helpers)

CAP_TOTAL = 2 * 2**20  # bytes/s for the whole Hub in the capped rounds
HUB_ADDR = os.environ.get("GPUFLEET_FLEET_HUB_ADDR", "10.231.0.5")
TARGET = "gpufleet-lab/Kimi-K2.6-mini"
DRAFTER = "gpufleet-lab/Kimi-K2.6-mini-DFlash"
WORK = "/srv/bench-fleet"
# (label, distribution, hosts, capped)
ROUNDS = [
    ("hub-1-capped", "hub", 1, True),
    ("hub-4-capped", "hub", 4, True),
    ("peers-1-capped", "peers", 1, True),
    ("peers-4-capped", "peers", 4, True),
    ("hub-1-uncapped", "hub", 1, False),
    ("hub-4-uncapped", "hub", 4, False),
]


def repo_bytes(store: Path) -> int:
    total = 0
    for repo, kind, ref in ((TARGET, "branches", "main"), (DRAFTER, "tags", "v1.0")):
        data = json.loads((store / "store" / repo / "repo.json").read_text())
        total += sum(f["size"] for f in data["commits"][data["refs"][kind][ref]]["files"])
    return total


def inventory_hosts(inventory: str) -> list[str]:
    with open(inventory) as handle:
        return [line.split()[0] for line in handle if "ansible_host=" in line]


def write_vars(path: Path, hub: str, wheelhouse: str) -> None:
    models = [
        {"name": "kimi", "repo_id": TARGET, "revision": "main", "options": {"retry_wait": 1}},
        {"name": "kimi-dflash", "repo_id": DRAFTER, "revision": "v1.0", "target": "kimi", "options": {"retry_wait": 1}},
    ]
    path.write_text(json.dumps({"model_models": models, "model_hf_endpoint": hub, "model_min_free_bytes": 0,
                                "model_progress_interval": 1, "model_tools_wheelhouse": wheelhouse}))


def ansible(args: list[str], collections: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_HOST_KEY_CHECKING="False",
               ANSIBLE_PIPELINING="True")
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=3600, check=False)


def clean(inventory: str, collections: str) -> None:
    res = ansible([str(Path(sys.executable).parent / "ansible"), "gpu_nodes", "-i", inventory, "-m", "ansible.builtin.file",
                   "-a", f"path={WORK} state=absent"], collections)
    if res.returncode != 0:
        raise SystemExit(f"cleaning {WORK} failed: {res.stdout[-2000:]} {res.stderr[-2000:]}")


def stage_once(label: str, *, distribution: str, limit: list[str], ctx: dict) -> dict:
    clean(ctx["inventory"], ctx["collections"])
    seq = fleet_lab.hub_seq(ctx["hub"])
    t0 = time.monotonic()
    res = ansible([str(Path(sys.executable).parent / "ansible-playbook"), "-i", ctx["inventory"], "gpufleet.llm.stage",
                   "--limit", ",".join(limit), "-e", "@" + str(ctx["vars"]), "-e", f"model_distribution={distribution}",
                   "-e", f"model_models_root={WORK}/{label}"], ctx["collections"])
    wall = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"stage {label} failed (exit {res.returncode}):\n{res.stdout[-4000:]}\n{res.stderr[-2000:]}")
    hub = fleet_lab.hub_bytes(ctx["hub"], seq)
    print(f"{label}: {wall:.1f} s, Hub bytes {hub['total']}", flush=True)
    return {"seconds": round(wall, 2), "hub_bytes": hub["total"], "hub_bytes_by_client": hub["by_client"]}


def ratios(rows: dict, copy: int) -> dict:
    def r(a, b, key="seconds"):
        return round(rows[a][key] / rows[b][key], 2) if rows[b][key] else None
    out = {
        "peers4_over_peers1_seconds": r("peers-4-capped", "peers-1-capped"),
        "peers4_over_hub1_seconds": r("peers-4-capped", "hub-1-capped"),
        "peers4_over_peers1_hub_bytes": r("peers-4-capped", "peers-1-capped", "hub_bytes"),
        "peers4_hub_bytes_over_one_copy": round(rows["peers-4-capped"]["hub_bytes"] / copy, 3),
        "hub4_over_hub1_seconds_capped": r("hub-4-capped", "hub-1-capped"),
        "hub4_over_hub1_hub_bytes_capped": r("hub-4-capped", "hub-1-capped", "hub_bytes"),
        "hub4_over_hub1_seconds_uncapped": r("hub-4-uncapped", "hub-1-uncapped"),
    }
    out["goals"] = {
        "peers4_seconds_at_most_1.5x_1host": out["peers4_over_peers1_seconds"] is not None and out["peers4_over_peers1_seconds"] <= 1.5,
        "peers4_hub_bytes_at_most_1.1x_1host": out["peers4_over_peers1_hub_bytes"] is not None and out["peers4_over_peers1_hub_bytes"] <= 1.1,
        "hub4_uncapped_not_4x": out["hub4_over_hub1_seconds_uncapped"] is not None and out["hub4_over_hub1_seconds_uncapped"] < 2.0,
    }
    return out


def run(inventory: str, collections: str, wheelhouse: str, tmp: Path) -> dict:
    info = bench.lab()
    store = fixtures.ensure_fixtures()
    hosts4 = inventory_hosts(inventory)[:4]
    if len(hosts4) < 4:
        raise SystemExit(f"{inventory} has {len(hosts4)} hosts; the fleet benchmark needs 4")
    subprocess.run(["ip", "addr", "replace", HUB_ADDR + "/32", "dev", info["bridge"]], check=True)
    pidfile = tmp / "hub.pid"
    try:
        hub = fleet_lab.hub_start(str(bench.hosts.run_dir() / "lab.json"), str(store), str(pidfile), HUB_ADDR)
        ctx = {"inventory": inventory, "collections": collections, "hub": hub, "vars": tmp / "vars.json"}
        write_vars(ctx["vars"], hub, wheelhouse)
        # warm-up, not measured: tools venv, page caches, nginx binary
        stage_once("warmup", distribution="peers", limit=hosts4, ctx=ctx)
        rows = {}
        for label, distribution, count, capped in ROUNDS:
            fleet_lab._call(hub, "/_lab/config", {"rate_total": CAP_TOTAL if capped else 0})
            rows[label] = stage_once(label, distribution=distribution, limit=hosts4[:count], ctx=ctx)
            rows[label].update(distribution=distribution, hosts=count, capped=capped)
        clean(inventory, collections)
    finally:
        if pidfile.exists():
            subprocess.run(["kill", pidfile.read_text().strip()], check=False)
        subprocess.run(["ip", "addr", "del", HUB_ADDR + "/32", "dev", info["bridge"]], check=False)
    copy = repo_bytes(store)
    return {
        "benchmark": "fleet",
        "what": f"playbooks/stage.yml: {TARGET} + {DRAFTER} ({copy} bytes) from a private lab Hub, 1 vs 4 hosts, "
                f"hub vs peers; capped rounds: rate_total {CAP_TOTAL} B/s",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "bytes_one_copy": copy,
        "cap_total_bytes_s": CAP_TOTAL,
        "rounds": rows,
        "ratios": ratios(rows, copy),
    }


def markdown(result: dict) -> str:
    lines = ["# Fleet staging: 1 host vs 4, hub vs peers", "", result["what"] + f"; {result['when']}.",
             "Wall time = the whole stage playbook; Hub bytes from the Hub's request log.", "",
             "| round | mode | hosts | Hub capped | seconds | Hub bytes | Hub bytes / one copy |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for label, row in result["rounds"].items():
        lines.append(f"| {label} | {row['distribution']} | {row['hosts']} | {row['capped']} | {row['seconds']} | "
                     f"{row['hub_bytes']} | {row['hub_bytes'] / result['bytes_one_copy']:.2f} |")
    lines += ["", "| ratio | value |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in result["ratios"].items() if k != "goals"]
    lines += ["", "Goals: " + ", ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in result["ratios"]["goals"].items()), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--inventory", default=os.environ.get("GPUFLEET_LAB_INVENTORY", str(bench.hosts.run_dir() / "inventory.ini")))
    parser.add_argument("--collections", default=str(fixtures.default_cache_dir() / "collections"),
                        help="ANSIBLE_COLLECTIONS_PATH holding ansible_collections/gpufleet/llm")
    parser.add_argument("--wheelhouse", default=str(fixtures.default_cache_dir() / "wheelhouse" / "tools"))
    args = parser.parse_args(argv)
    tmp = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True, check=True).stdout.strip())
    try:
        result = run(args.inventory, args.collections, args.wheelhouse, tmp)
    finally:
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    bench.RESULTS.mkdir(exist_ok=True)
    (bench.RESULTS / "fleet.json").write_text(json.dumps(result, indent=2) + "\n")
    (bench.RESULTS / "fleet.md").write_text(markdown(result))
    print(markdown(result))
    print(f"written to {bench.RESULTS / 'fleet.json'} and fleet.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
