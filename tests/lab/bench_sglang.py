"""sglang_bench benchmark: how faithfully the benchmark client measures a server whose speed is
known exactly. Figures to bench-results/sglang-bench.json and .md, never assertions.

The server is the lab's SGLang STAND-IN (tests/lab/sglang_standin/), twice on loopback: with
speculative options (block 8, ACCEPT_MEAN, SPEC_COST) and without. Its delay model is open, so for
every concurrency level the true figures are known in advance:

  baseline output tok/s = concurrency * 1000 / STEP_MS
  spec accept length    = predicted_accept_mean(block, mean, max_new_tokens)   (truncation-aware)
  speedup               = predicted_speedup(block, mean, max_new_tokens, SPEC_COST)

and the benchmark's measurements (gpufleet.llm.sglang_bench's built-in load generator, the code the
module runs, with its method: per level and arm a warm-up, then --repeats runs each after
/flush_cache; the speedup with its 95% Welch t interval over the repeats) are compared with them. Stand-in figures say NOTHING about GPU performance: this
measures the client's fidelity, i.e. how much of what it reports is its own overhead.

Usage: python tests/lab/bench_sglang.py [--levels 1,8,32] [--max-new-tokens 128] [--repeats 3] [--out bench-results]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import pathlib
import platform
import socket
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import ready  # noqa: E402  (tests/lab/ready.py)

STANDIN = HERE / "sglang_standin" / "gpufleet_lab_sglang.py"
CACHE = pathlib.Path(os.environ.get("GPUFLEET_LAB_CACHE", os.path.expanduser("~/.cache/gpufleet-lab")))
WORK = CACHE / "bench-sglang"


def _import_collection():
    """The collection's code, imported as the collection it is (a link under the cache)."""
    link = WORK / "collections" / "ansible_collections" / "gpufleet" / "llm"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink() or os.readlink(link) != str(REPO):
        if link.is_symlink():
            link.unlink()
        link.symlink_to(REPO)
    sys.path.insert(0, str(WORK / "collections"))
    from ansible_collections.gpufleet.llm.plugins.module_utils._bench import bench as _sglang_bench  # noqa: E402
    from ansible_collections.gpufleet.llm.plugins.module_utils._bench import run as _sglang_bench_run  # noqa: E402
    from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import load as _sglang_load  # noqa: E402
    from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import model_trees  # noqa: E402
    return _sglang_bench, _sglang_bench_run, _sglang_load, model_trees


def _standin_module():
    spec = importlib.util.spec_from_file_location("gpufleet_lab_sglang_bench", STANDIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(workdir, name, options, env):
    port = _free_port()
    base = workdir / name
    (base / "home").mkdir(parents=True)
    config = base / "server.yaml"
    config.write_text("".join("%s: %s\n" % (k, json.dumps(v)) for k, v in dict(options, port=port).items()))
    child_env = dict(os.environ, HOME=str(base / "home"), PYTHONUNBUFFERED="1",
                     HF_MODULES_CACHE=str(base / "home" / "hf"), TRITON_CACHE_DIR=str(base / "home" / "triton"),
                     TORCHINDUCTOR_CACHE_DIR=str(base / "home" / "inductor"), **env)
    try:
        return ready.start([sys.executable, STANDIN, "--config", config], ready_file=base / "ready.json",
                           log=base / "server.log", what="stand-in %s" % name,
                           until=lambda info: info["state"] == "ready", env=child_env, cwd=str(base))
    except ready.NotReady as exc:
        raise SystemExit(str(exc)) from None


def _cpu_seconds(pid):
    """utime + stime of a process, from /proc (Linux)."""
    with open("/proc/%d/stat" % pid) as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--levels", default="1,8,32")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--accept-mean", type=float, default=3.5)
    parser.add_argument("--spec-cost", type=float, default=1.2)
    parser.add_argument("--block", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4, help="requests per concurrent slot")
    parser.add_argument("--repeats", type=int, default=3, help="measured runs per level and arm")
    parser.add_argument("--out", default=str(REPO / "bench-results"))
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]

    bench, bench_run, load, model_trees = _import_collection()
    standin = _standin_module()
    WORK.mkdir(parents=True, exist_ok=True)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="run-", dir=str(WORK)))
    golden = workdir / "models"
    target, drafter = model_trees.make_golden(str(golden))
    env = {"GPUFLEET_STANDIN_LOAD_SECONDS": "0", "GPUFLEET_STANDIN_STEP_MS": str(args.step_ms),
           "GPUFLEET_STANDIN_ACCEPT_MEAN": str(args.accept_mean), "GPUFLEET_STANDIN_SPEC_COST": str(args.spec_cost),
           "GPUFLEET_STANDIN_SEED": "0"}
    servers = {}
    try:
        servers["spec"] = _start(workdir, "spec", {
            "model-path": target, "host": "127.0.0.1", "speculative-algorithm": "DFLASH",
            "speculative-draft-model-path": drafter, "speculative-num-draft-tokens": args.block,
            "trust-remote-code": True}, env)
        servers["baseline"] = _start(workdir, "baseline", {"model-path": target, "host": "127.0.0.1"}, env)
        prompts = bench.load_prompts(str(REPO / "playbooks" / "files" / "bench-prompts.jsonl"))
        rows = []
        predicted_accept = standin.predicted_accept_mean(args.block, args.accept_mean, args.max_new_tokens)
        predicted_speedup = standin.predicted_speedup(args.block, args.accept_mean, args.max_new_tokens,
                                                      args.spec_cost)
        for level in levels:
            # The same number of rounds per slot at every level (at least 8 requests), so that the
            # tail (the slowest slot's last request, speculative step counts vary) weighs alike.
            requests = load.build_requests(prompts, max(8, args.rounds * level), args.max_new_tokens)
            result = {}
            cpu = {}
            for label in ("spec", "baseline"):
                proc, info = servers[label]
                url = info["url"]
                # The module's method: a warm-up (one request per slot), then each repeat after /flush_cache.
                load.run_level(url, requests[:level], level, request_timeout=120)
                records, repeats, wall, client_cpu, server_cpu = [], [], 0.0, 0.0, 0.0
                for repeat in range(args.repeats):
                    bench_run.flush_cache(url)
                    client0, server0 = time.process_time(), _cpu_seconds(proc.pid)
                    run_records, run_wall = load.run_level(url, requests, level, request_timeout=120)
                    client_cpu += time.process_time() - client0
                    server_cpu += _cpu_seconds(proc.pid) - server0
                    records.extend(run_records)
                    repeats.append(bench.repeat_summary(run_records, run_wall, repeat))
                    wall += run_wall
                # CPU share of the wall time: near 1.0 on a side means that side is the bottleneck
                # (these are 2-core machines, shared by client and server).
                cpu[label] = dict(client=client_cpu / wall, server=server_cpu / wall)
                result[label] = bench.aggregate(records, wall, level, bench.server_state(url), repeats=repeats)
            compared = bench.speedup([result["spec"]], [result["baseline"]])[0]
            speedup = compared["speedup"]
            ideal_base = level * 1000.0 / args.step_ms
            rows.append(dict(
                concurrency=level, requests=len(requests),
                spec_output_throughput=result["spec"]["output_throughput"],
                baseline_output_throughput=result["baseline"]["output_throughput"],
                baseline_ideal_throughput=ideal_base,
                baseline_fidelity=result["baseline"]["output_throughput"] / ideal_base,
                accept_length=result["spec"]["accept_length"], verify_steps=result["spec"]["verify_steps"],
                accept_length_predicted=predicted_accept,
                accept_length_error_pct=100.0 * (result["spec"]["accept_length"] / predicted_accept - 1),
                server_accept_length=result["spec"]["server_accept_length"],
                speedup=speedup, speedup_ci_low=compared["speedup_ci_low"], speedup_ci_high=compared["speedup_ci_high"],
                repeats=args.repeats, speedup_predicted=predicted_speedup,
                speedup_error_pct=100.0 * (speedup / predicted_speedup - 1),
                spec_latency_p50=result["spec"]["latency_s"]["p50"], spec_ttft_p50=result["spec"]["ttft_s"]["p50"],
                baseline_latency_p50=result["baseline"]["latency_s"]["p50"],
                cpu_share=cpu))
            print("c=%-3d spec %7.1f tok/s  baseline %7.1f tok/s (ideal %6.1f)  speedup %.3f (predicted %.3f)  "
                  "accept %.3f (predicted %.3f)" % (level, rows[-1]["spec_output_throughput"],
                                                    rows[-1]["baseline_output_throughput"], ideal_base, speedup,
                                                    predicted_speedup, rows[-1]["accept_length"], predicted_accept))
    finally:
        for proc, _info in servers.values():
            ready.stop(proc)

    doc = dict(
        benchmark="sglang_bench client fidelity against the lab SGLang stand-in",
        warning="stand-in figures: a delay model, no GPU; they say nothing about real GPU performance",
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        machine=dict(cpus=os.cpu_count(), python=platform.python_version(), load_avg=os.getloadavg()),
        model=dict(step_ms=args.step_ms, accept_mean=args.accept_mean, spec_cost=args.spec_cost, block=args.block,
                   max_new_tokens=args.max_new_tokens),
        levels=rows,
    )
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sglang-bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = [
        "# sglang_bench client fidelity (lab SGLang stand-in: not GPU figures)", "",
        "Stand-in delay model: %s ms per step, speculative step x%s, accept mean %s (block %d), %d new tokens per "
        "request; %s, %d CPUs, load %.1f at start."
        % (args.step_ms, args.spec_cost, args.accept_mean, args.block, args.max_new_tokens, doc["date"],
           doc["machine"]["cpus"], doc["machine"]["load_avg"][0]), "",
        "| concurrency | requests x repeats | spec tok/s | baseline tok/s | baseline / ideal "
        "| accept length (predicted) | speedup [95% CI] (predicted) | speedup error | CPU client / server (baseline) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        interval = ("[%.3f-%.3f]" % (row["speedup_ci_low"], row["speedup_ci_high"])
                    if row["speedup_ci_low"] is not None else "[-]")
        lines.append("| %d | %d x %d | %.1f | %.1f | %.3f | %.3f (%.3f) | %.3f %s (%.3f) | %+.1f%% | %.2f / %.2f |" % (
            row["concurrency"], row["requests"], row["repeats"], row["spec_output_throughput"],
            row["baseline_output_throughput"], row["baseline_fidelity"], row["accept_length"],
            row["accept_length_predicted"], row["speedup"], interval, row["speedup_predicted"],
            row["speedup_error_pct"], row["cpu_share"]["baseline"]["client"], row["cpu_share"]["baseline"]["server"]))
    (out / "sglang-bench.md").write_text("\n".join(lines) + "\n")
    print("wrote %s and %s" % (out / "sglang-bench.json", out / "sglang-bench.md"))


if __name__ == "__main__":
    main()
