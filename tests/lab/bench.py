"""Lab benchmarks: figures go to bench-results/*.json, never into assertions.

  bench.py hub-throughput [--runs 3]   aria2c on lab host gpu1 pulling the 1 GiB fixture through the
                                       lab Hub's 302 to its CDN: 16 connections vs 1, side by side,
                                       uncapped (what the Hub can serve) and under a CDN-like cap
                                       (10 MiB/s per connection, 160 MiB/s in total)

Needs the lab up (make lab-up). These machines are shared and noisy: compare the ratios measured in
one run, not figures across runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import fixtures  # noqa: E402
import hosts  # noqa: E402

RESULTS = REPO / "bench-results"


def lab() -> dict:
    path = hosts.run_dir() / "lab.json"
    if not path.exists():
        raise SystemExit("the lab is not up: run `make lab-up` first")
    return json.loads(path.read_text())


def on_host(info: dict, host: str, script: str, timeout: int = 600) -> subprocess.CompletedProcess:
    addr = info["hosts"][host]["address"]
    cmd = ["ssh", "-i", info["ssh_key"], "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
           "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", f"root@{addr}", script]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def aria2_once(info: dict, url: str, size: int, connections: int) -> float:
    """Seconds for one whole download into /tmp on gpu1 (file removed afterwards)."""
    script = (
        "set -e; d=$(mktemp -d); t0=$(date +%s.%N); "
        f"aria2c -q -x{connections} -s{connections} -k1M --file-allocation=none --allow-overwrite=true "
        f"--auto-file-renaming=false -d $d -o blob '{url}'; t1=$(date +%s.%N); "
        "s=$(stat -c %s $d/blob); rm -rf $d; echo $t0 $t1 $s"
    )
    res = on_host(info, "gpu1", script)
    if res.returncode != 0:
        raise SystemExit(f"aria2c on gpu1 failed (exit {res.returncode}): {res.stderr.strip() or res.stdout.strip()}")
    t0, t1, got = res.stdout.split()
    if int(got) != size:
        raise SystemExit(f"aria2c fetched {got} bytes, expected {size}")
    return float(t1) - float(t0)


def hub_control(info: dict, path: str, body: dict | None = None) -> dict:
    # The control API lives on the Hub's API address inside the lab netns; the controller reaches
    # it over the lab bridge.
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(info["hub"]["endpoint"] + path, data=data, method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read() or b"{}")


def measure(info: dict, url: str, size: int, runs: int) -> dict:
    mib = size / 2**20
    rows = {}
    for connections in (16, 1):
        times = [aria2_once(info, url, size, connections) for dummy in range(runs)]
        rows[f"x{connections}"] = {
            "connections": connections,
            "seconds": [round(t, 3) for t in times],
            "median_mib_s": round(mib / statistics.median(times), 1),
            "best_mib_s": round(mib / min(times), 1),
        }
    rows["ratio_x16_over_x1"] = round(rows["x16"]["median_mib_s"] / rows["x1"]["median_mib_s"], 2)
    return rows


# A CDN-like limit: one connection is slow, many connections share a link.
CDN_LIKE_CAPS = {"rate_per_conn": 10 * 2**20, "rate_total": 160 * 2**20}


def hub_throughput(runs: int) -> dict:
    info = lab()
    store = fixtures.ensure_fixtures(throughput=True)
    # The Hub reads its store per request, so a repo generated now is served at once.
    repo = json.loads((store / "store" / fixtures.THROUGHPUT / "repo.json").read_text())
    main = repo["refs"]["branches"]["main"]
    entry = next(f for f in repo["commits"][main]["files"] if f["path"] == "model.safetensors")
    size = entry["size"]
    # The figure is only worth something if the fixture is what it claims: 1 GiB, one U8 tensor.
    from safetensors import safe_open
    with safe_open(str(store / "blobs" / entry["lfs"]["sha256"]), "numpy") as handle:
        if size != 1 << 30 or list(handle.keys()) != ["data"]:
            raise SystemExit(f"throughput fixture is not the expected 1 GiB single-tensor file: {size} bytes")
    url = f"{info['hub']['endpoint']}/{fixtures.THROUGHPUT}/resolve/main/model.safetensors"
    hub_control(info, "/_lab/reset", {})
    try:
        uncapped = measure(info, url, size, runs)
        hub_control(info, "/_lab/config", CDN_LIKE_CAPS)
        # One run: a single capped connection needs ~100 s for the 1 GiB file.
        capped = measure(info, url, size, 1)
    finally:
        hub_control(info, "/_lab/reset", {})
    result = {
        "benchmark": "hub-throughput",
        "what": "aria2c on lab host gpu1, 1 GiB LFS file via the lab Hub's 302 to its CDN address",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "bytes": size,
        "runs": runs,
        "uncapped": uncapped,
        "capped": {"caps": CDN_LIKE_CAPS, "runs": 1, **capped},
    }
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("hub-throughput")
    p.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.runs > 20:
        parser.error("--runs must be between 1 and 20")
    result = hub_throughput(args.runs)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{result['benchmark']}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    for scenario in ("uncapped", "capped"):
        rows = result[scenario]
        for name in ("x16", "x1"):
            row = rows[name]
            print(f"{scenario} {name}: median {row['median_mib_s']} MiB/s (best {row['best_mib_s']}) over {len(row['seconds'])} run(s)")
        print(f"{scenario}: x16/x1 = {rows['ratio_x16_over_x1']}")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
