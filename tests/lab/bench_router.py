"""Benchmark: requests during a 4-server roll behind the SGLang router, with the drain and without it (make bench,
stage bench-router).

The set-up is the sglang_router_roll integration target's (its vars.yml, router.yml and cleanup.yml): four lab
hosts each run a server (the lab's SGLang STAND-IN under the sglang role's unit; 300-token requests at 20 ms a
step take 6 s), the first one also the real sglang-router 0.3.2 (round_robin, health checks every 60 s, 3
failures). tests/lab/router_load.py streams through the router from the controller (8 closed-loop clients,
chat and /generate in turn) during three rounds, in one run:

  - steady: no roll, until every client finished 4 requests (the reference latency);
  - drain: the roll to the other revision, gpufleet_serial 1, sglang_router_drain true (each server leaves the
    router, drains, restarts, is probed and comes back);
  - no-drain: the same roll back, sglang_router_drain false (each server restarts in place).

Per round: requests sent, ok, failed (non-2xx, connection errors), truncated (a stream without its end),
latency p50/p99 of the ok requests, the roll's wall time. After a roll the load runs on until every client
finished two more requests. Figures to bench-results/router.json and router.md, never assertions (the
integration target asserts). Stand-in figures say nothing about GPU performance: what they show is what the
router and the roll do to requests in flight.

Needs the lab up with 4 hosts and the router wheelhouse (make setup builds it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TARGET = REPO / "tests" / "integration" / "targets" / "sglang_router_roll"
sys.path.insert(0, str(HERE))

import bench  # noqa: E402
import fixtures  # noqa: E402

ROUTER_KEY = "rtest-router-key-51c7e9a2"  # the target's vars.yml: a test value
CLIENTS = 8
MAX_TOKENS = 300
PORT, ROUTER_PORT = 30112, 30080
ROUNDS = [("drain", "main", True), ("no-drain", "v1.0", False)]


def four_hosts(inventory: str, out: Path) -> list[str]:
    """The lab inventory's first 4 hosts (their vars kept), gpu1 also in sglang_routers; their addresses."""
    lines, addresses = [], []
    with open(inventory, encoding="utf-8") as handle:
        for line in handle:
            if "ansible_host=" in line.split(" ", 1)[-1] and line.startswith("gpu"):
                if len(addresses) == 4:
                    continue
                addresses.append(line.split("ansible_host=", 1)[1].split()[0])
            lines.append(line.rstrip("\n"))
    if len(addresses) < 4:
        raise SystemExit(f"{inventory} has {len(addresses)} hosts; the router benchmark needs 4")
    out.write_text("\n".join(lines + ["", "[sglang_routers]", "gpu1", ""]))
    return addresses


class Bench:
    def __init__(self, inventory: Path, collections: str, wheelhouse: str, tmp: Path, addresses: list[str]):
        self.inventory, self.collections, self.tmp = inventory, collections, tmp
        self.router = f"http://{addresses[0]}:{ROUTER_PORT}"
        self.workers = [f"http://{a}:{PORT}" for a in addresses]
        self.extra = ["-e", f"@{TARGET / 'vars.yml'}", "-e", f"model_tools_wheelhouse={wheelhouse}",
                      "-e", f"sglang_router_wheelhouse={Path(wheelhouse).parent / 'router'}"]

    def env(self) -> dict:
        return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=self.collections, ANSIBLE_HOST_KEY_CHECKING="False",
                    ANSIBLE_PIPELINING="True", ROUTER_LOAD_API_KEY=ROUTER_KEY)

    def play(self, book: str, *args: str, inventory: Path | None = None, check: bool = True) -> float:
        cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory or self.inventory),
               *self.extra, book, *args]
        t0 = time.monotonic()
        res = subprocess.run(cmd, capture_output=True, text=True, env=self.env(), cwd=TARGET, timeout=3600, check=False)
        if check and res.returncode != 0:
            raise SystemExit(f"{book} {' '.join(args)} failed (exit {res.returncode}):\n{res.stdout[-4000:]}\n{res.stderr[-2000:]}")
        return time.monotonic() - t0

    def load(self, name: str) -> "Load":
        return Load(self, name)


class Load:
    """router_load.py run in the background; wait_ok() waits for progress; stop() returns the summary."""

    def __init__(self, b: Bench, name: str):
        self.b, self.name = b, name
        self.paths = {k: b.tmp / f"{name}.{k}" for k in ("json", "progress", "stop", "log")}
        self.log = open(self.paths["log"], "w", encoding="utf-8")
        self.proc = subprocess.Popen([sys.executable, str(HERE / "router_load.py"), "run", "--router", b.router,
                                      "--clients", str(CLIENTS), "--max-tokens", str(MAX_TOKENS), "--prefix", name + "-",
                                      "--out", str(self.paths["json"]), "--progress", str(self.paths["progress"]),
                                      "--stop-file", str(self.paths["stop"]), "--watch-workers"],
                                     env=b.env(), stdout=self.log, stderr=subprocess.STDOUT)

    def progress(self, field: str) -> int:
        try:
            return json.loads(self.paths["progress"].read_text())[field]
        except (OSError, ValueError, KeyError):
            return 0

    def wait(self, field: str, target: int) -> None:
        deadline = time.monotonic() + 600  # a guard against a dead router, not a measurement
        while self.progress(field) < target:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"load {self.name}: {field} never reached {target}: {self.paths['log'].read_text()[-2000:]}")
            time.sleep(0.2)

    def stop(self) -> dict:
        self.wait("ok", self.progress("ok") + 2 * CLIENTS)
        self.paths["stop"].write_text("")
        self.proc.wait(timeout=600)
        self.log.close()
        if self.proc.returncode != 0:
            raise SystemExit(f"load {self.name} failed: {self.paths['log'].read_text()[-2000:]}")
        return json.loads(self.paths["json"].read_text())


def row(summary: dict, roll_seconds: float | None) -> dict:
    keys = ("sent", "ok", "failed", "truncated", "failures", "latency_p50", "latency_p99")
    out = {k: summary[k] for k in keys}
    out["roll_seconds"] = None if roll_seconds is None else round(roll_seconds, 1)
    out["removals"] = sum(len(w) for w in summary["workers_watch"]["windows"].values())
    out["errors"] = summary["errors"][:3]
    return out


def run(b: Bench, plain_inventory: Path) -> dict:
    b.play("cleanup.yml", check=False)
    b.play(str(HERE / "prepare-hosts.yml"))
    b.play("gpufleet.llm.deploy", "-e", "gpufleet_serial=4", "-e", "rtest_revision=v1.0", inventory=plain_inventory)
    b.play("router.yml")
    rows = {}
    steady = b.load("steady")
    steady.wait("clients_with_ok", CLIENTS)
    steady.wait("ok", 4 * CLIENTS)
    rows["steady"] = row(steady.stop(), None)
    print(f"steady: {rows['steady']}", flush=True)
    for label, revision, drain in ROUNDS:
        load = b.load(label)
        load.wait("clients_with_ok", CLIENTS)
        seconds = b.play("gpufleet.llm.deploy", "-e", f"rtest_revision={revision}", "-e", "gpufleet_serial=1",
                         "-e", f"sglang_router_drain={str(drain).lower()}")
        rows[label] = row(load.stop(), seconds)
        rows[label].update(revision=revision, drain=drain)
        print(f"{label}: {rows[label]}", flush=True)
    b.play("cleanup.yml", check=False)
    return {
        "benchmark": "router",
        "what": (f"4 stand-in servers behind sglang-router 0.3.2 (round_robin, health checks every 60 s, 3 failures); "
                 f"{CLIENTS} closed-loop clients streaming chat and /generate ({MAX_TOKENS} tokens, 6 s a request) through it; "
                 "a roll of every server to the other revision with gpufleet_serial 1, with the drain and without it"),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rounds": rows,
    }


def markdown(result: dict) -> str:
    lines = ["# Requests during a 4-server roll behind the SGLang router", "", result["what"] + f"; {result['when']}.",
             "Latency: seconds, of the ok requests. Failed: non-2xx or connection errors; truncated: a stream without its end.", "",
             "| round | roll s | removals | sent | ok | failed | truncated | p50 s | p99 s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label, r in result["rounds"].items():
        lines.append(f"| {label} | {r['roll_seconds'] if r['roll_seconds'] is not None else '-'} | {r['removals']} | {r['sent']} | "
                     f"{r['ok']} | {r['failed']} | {r['truncated']} | {r['latency_p50']} | {r['latency_p99']} |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--inventory", default=os.environ.get("GPUFLEET_LAB_INVENTORY", str(bench.hosts.run_dir() / "inventory.ini")))
    parser.add_argument("--collections", default=str(fixtures.default_cache_dir() / "collections"),
                        help="ANSIBLE_COLLECTIONS_PATH holding ansible_collections/gpufleet/llm")
    parser.add_argument("--wheelhouse", default=str(fixtures.default_cache_dir() / "wheelhouse" / "tools"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-router-") as tmp:
        tmp = Path(tmp)
        inventory = tmp / "inventory.ini"
        addresses = four_hosts(args.inventory, inventory)
        plain = tmp / "plain.ini"
        plain.write_text(inventory.read_text().split("\n[sglang_routers]")[0] + "\n")
        result = run(Bench(inventory, args.collections, args.wheelhouse, tmp, addresses), plain)
    bench.RESULTS.mkdir(exist_ok=True)
    (bench.RESULTS / "router.json").write_text(json.dumps(result, indent=2) + "\n")
    (bench.RESULTS / "router.md").write_text(markdown(result))
    print(markdown(result))
    print(f"written to {bench.RESULTS / 'router.json'} and router.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
