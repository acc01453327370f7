"""Benchmark: hf_snapshot vs huggingface_hub.snapshot_download on lab host gpu1 (make bench).

The lab Hub is capped like a CDN (10 MiB/s per connection) and like a link (160 MiB/s in total); the
repo is gpufleet-lab/throughput-4x256m (4 shards, ~1 GiB, built by fixtures.py --snapshot-bench).
Rounds alternate the two tools into fresh directories on gpu1. Throughput = repo bytes / the whole
call's wall time measured on the host around the call (listing and hashing included): for
hf_snapshot the module's own `duration`, for snapshot_download the Python call. Results go to
bench-results/snapshot.json and snapshot.md; the median over the rounds is the figure.

Needs the lab up (make lab-up) and the tools venv on gpu1 (the model role, e.g. make demo).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import bench  # noqa: E402
import fixtures  # noqa: E402

CAPS = {"rate_per_conn": 10 * 2**20, "rate_total": 160 * 2**20}
HOST = "gpu1"
TOOLS_PY = "/opt/gpufleet/tools/bin/python"
WORK = "/srv/bench-snapshot"


def snapshot_download_once(info: dict, endpoint: str) -> float:
    script = (
        f"rm -rf {WORK}/hub && mkdir -p {WORK}/hub && "
        f"HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_PROGRESS_BARS=1 HF_HOME={WORK}/hf-home HF_ENDPOINT={endpoint} "
        f"{TOOLS_PY} -c 'import time; from huggingface_hub import snapshot_download as s; t0 = time.monotonic(); "
        f"s(\"{fixtures.SNAPSHOT_BENCH}\", local_dir=\"{WORK}/hub\", token=False); print(time.monotonic() - t0)'"
    )
    res = bench.on_host(info, HOST, script, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"snapshot_download on {HOST} failed: {res.stderr.strip()[-2000:]}")
    return float(res.stdout.strip().splitlines()[-1])


def hf_snapshot_once(info: dict, endpoint: str, collections: str) -> dict:
    inventory = bench.hosts.run_dir() / "inventory.ini"
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_HOST_KEY_CHECKING="False")
    clean = bench.on_host(info, HOST, f"rm -rf {WORK}/hfs && mkdir -p {WORK}")
    if clean.returncode != 0:
        raise SystemExit(clean.stderr)
    args = json.dumps({"repo_id": fixtures.SNAPSHOT_BENCH, "dest": f"{WORK}/hfs", "endpoint": endpoint,
                       "min_free_bytes": 0})
    t0 = time.monotonic()
    res = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), HOST, "-i", str(inventory), "-m", "gpufleet.llm.hf_snapshot",
         "-a", args, "-e", f"ansible_python_interpreter={TOOLS_PY}", "--one-line"],
        capture_output=True, text=True, env=env, timeout=1800, check=False,
    )
    wall = time.monotonic() - t0
    try:
        # --one-line: "gpu1 | CHANGED => {...}"
        line = next(l for l in res.stdout.splitlines() if l.startswith(HOST + " |"))
        result = json.loads(line.split("=>", 1)[1])
    except (ValueError, StopIteration, IndexError):
        raise SystemExit(f"hf_snapshot via ansible failed (exit {res.returncode}): {res.stdout[-2000:]} {res.stderr[-2000:]}")
    if result.get("failed"):
        raise SystemExit(f"hf_snapshot failed: {result.get('msg')}")
    return {"duration": result["duration"], "ansible_wall": wall, "bytes": result["bytes_fetched"]}


def run(rounds: int, collections: str) -> dict:
    info = bench.lab()
    store = fixtures.ensure_fixtures(snapshot_bench=True)
    repo = json.loads((store / "store" / fixtures.SNAPSHOT_BENCH / "repo.json").read_text())
    size = sum(f["size"] for f in repo["commits"][repo["refs"]["branches"]["main"]]["files"])
    endpoint = info["hub"]["endpoint"]
    mib = size / 2**20
    rows = {"hf_snapshot": [], "snapshot_download": []}
    extra = []
    bench.hub_control(info, "/_lab/reset", {})
    try:
        bench.hub_control(info, "/_lab/config", CAPS)
        for i in range(rounds):
            # alternate which tool goes first, so neither always meets a warm or cold page cache
            order = ("hf_snapshot", "snapshot_download") if i % 2 == 0 else ("snapshot_download", "hf_snapshot")
            for tool in order:
                if tool == "hf_snapshot":
                    r = hf_snapshot_once(info, endpoint, collections)
                    if r["bytes"] != size:
                        raise SystemExit(f"hf_snapshot fetched {r['bytes']} bytes, expected {size}")
                    rows[tool].append(r["duration"])
                    extra.append(r["ansible_wall"])
                else:
                    rows[tool].append(snapshot_download_once(info, endpoint))
                print(f"round {i + 1} {tool}: {rows[tool][-1]:.1f} s = {mib / rows[tool][-1]:.1f} MiB/s", flush=True)
    finally:
        bench.hub_control(info, "/_lab/reset", {})
        bench.on_host(info, HOST, f"rm -rf {WORK}")
    result = {
        "benchmark": "snapshot",
        "what": f"{fixtures.SNAPSHOT_BENCH} ({size} bytes, 4 shards) from the lab Hub to {HOST}, caps {CAPS}",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "bytes": size,
        "rounds": rounds,
        "link_cap_mib_s": CAPS["rate_total"] / 2**20,
    }
    for tool, secs in rows.items():
        result[tool] = {"seconds": [round(s, 2) for s in secs],
                        "median_mib_s": round(mib / statistics.median(secs), 1),
                        "best_mib_s": round(mib / min(secs), 1)}
    result["hf_snapshot"]["ansible_wall_seconds"] = [round(s, 2) for s in extra]
    result["ratio_hf_snapshot_over_snapshot_download"] = round(
        result["hf_snapshot"]["median_mib_s"] / result["snapshot_download"]["median_mib_s"], 2)
    result["hf_snapshot_fraction_of_link_cap"] = round(result["hf_snapshot"]["median_mib_s"] / result["link_cap_mib_s"], 2)
    result["goals"] = {"ratio_at_least": 3.0, "fraction_of_link_cap_at_least": 0.85,
                       "ratio_met": result["ratio_hf_snapshot_over_snapshot_download"] >= 3.0,
                       "link_cap_met": result["hf_snapshot_fraction_of_link_cap"] >= 0.85}
    return result


def markdown(result: dict) -> str:
    lines = [
        "# hf_snapshot vs snapshot_download",
        "",
        result["what"] + f"; {result['rounds']} rounds, alternating; {result['when']}.",
        "Throughput = repo bytes / wall time of the whole call on the host (listing and hashing included).",
        "",
        "| tool | seconds per round | median MiB/s | best MiB/s |",
        "| --- | --- | --- | --- |",
    ]
    for tool in ("hf_snapshot", "snapshot_download"):
        row = result[tool]
        lines.append(f"| {tool} | {', '.join(str(s) for s in row['seconds'])} | {row['median_mib_s']} | {row['best_mib_s']} |")
    lines += [
        "",
        f"hf_snapshot / snapshot_download: **{result['ratio_hf_snapshot_over_snapshot_download']}x** (goal >= 3); "
        f"hf_snapshot at **{result['hf_snapshot_fraction_of_link_cap']}** of the {result['link_cap_mib_s']:.0f} MiB/s "
        "link cap (goal >= 0.85).",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--collections", default=str(fixtures.default_cache_dir() / "collections"),
                        help="ANSIBLE_COLLECTIONS_PATH holding ansible_collections/gpufleet/llm")
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= 10:
        parser.error("--rounds must be between 1 and 10")
    result = run(args.rounds, args.collections)
    bench.RESULTS.mkdir(exist_ok=True)
    (bench.RESULTS / "snapshot.json").write_text(json.dumps(result, indent=2) + "\n")
    (bench.RESULTS / "snapshot.md").write_text(markdown(result))
    print(markdown(result))
    print(f"written to {bench.RESULTS / 'snapshot.json'} and snapshot.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
