"""model_verify benchmark: figures to bench-results/verify.json and verify.md, never assertions.

  quick  on the sparse 64-shard, ~589 GB-apparent tree (sparse_tree.py, ~200,000 tensors) against
         the floor: opening all 64 headers with safetensors and loading the index, in one loop.
         Goal: <= 3x the floor.
  full   on ~2 GiB of real (random) shards, page cache warm, against
           - OpenSSL: `openssl dgst -sha256`, one process per core in parallel on the same files
             (goal: >= 0.9x its throughput);
           - huggingface_hub's HfApi().verify_repo_checksums against a lab Hub on loopback serving
             the same repo (goal: >= 1.8x).
  auto   re-check with nothing changed, against full (goal: <= 1% of full's time).

Times for model_verify are its own in-process ``duration`` (the module logic; Ansible's start-up is
not the module's cost); the others are wall time around the call or the processes.

Everything generated lives under $GPUFLEET_LAB_CACHE/bench-verify/ (kept between runs, stamped).
These machines are shared and noisy: compare ratios from one run, take the best of a few runs.

Usage: python tests/lab/bench_verify.py [--runs 5] [--real-gib 2] [--out bench-results]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save as st_save

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import ready  # noqa: E402
from sparse_tree import make_sparse_tree  # noqa: E402

CACHE = pathlib.Path(os.environ.get("GPUFLEET_LAB_CACHE", os.path.expanduser("~/.cache/gpufleet-lab")))
WORK = CACHE / "bench-verify"
BENCH_REPO = "gpufleet-bench/verify-2g"
SPARSE_VERSION = 1
REAL_VERSION = 1


def _import_verify():
    """model_verify's logic, imported as the collection it is (a link under the cache)."""
    coll = WORK / "collections"
    link = coll / "ansible_collections" / "gpufleet" / "llm"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink() or os.readlink(link) != str(REPO):
        if link.is_symlink():
            link.unlink()
        link.symlink_to(REPO)
    sys.path.insert(0, str(coll))
    from ansible_collections.gpufleet.llm.plugins.module_utils._verify import verify as _verify  # pylint: disable=import-error

    return _verify


def _stamped(directory: pathlib.Path, stamp: dict) -> bool:
    try:
        return json.loads((directory / ".bench-stamp.json").read_text()) == stamp
    except (OSError, ValueError):
        return False


def _stamp(directory: pathlib.Path, stamp: dict) -> None:
    (directory / ".bench-stamp.json").write_text(json.dumps(stamp) + "\n")


# ------------------------------------------------------------------------------------- trees


def ensure_sparse() -> pathlib.Path:
    out = WORK / "sparse"
    stamp = {"version": SPARSE_VERSION}
    if not _stamped(out, stamp):
        shutil.rmtree(out, ignore_errors=True)
        stats = make_sparse_tree(out)
        print(f"sparse tree: {stats['shards']} shards, {stats['tensors']} tensors, "
              f"{stats['apparent_bytes'] / 1e9:.0f} GB apparent in {stats['seconds']} s", flush=True)
        _stamp(out, stamp)
    return out


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # nosec B324 - git's object id


def ensure_real(gib: int) -> tuple:
    """~gib GiB of real shards (256 MiB each, random bytes), an index, a config, a manifest, and a
    lab-Hub store (repo.json + blobs hard-linked to the shards) serving the same repo."""
    root = WORK / f"real-{gib}g"
    tree = root / "tree"
    store = root / "hub"
    stamp = {"version": REAL_VERSION, "gib": gib}
    if _stamped(root, stamp):
        return tree, store, json.loads((root / "commit.json").read_text())["commit"]
    shutil.rmtree(root, ignore_errors=True)
    tree.mkdir(parents=True)
    start = time.monotonic()
    shard_bytes = 256 << 20
    n_shards = max(1, (gib << 30) // shard_bytes)
    per_tensor = shard_bytes // 4
    rng = np.random.default_rng(4242)
    weight_map = {}
    files = {}
    total = 0
    for i in range(1, n_shards + 1):
        name = f"model-{i:05d}-of-{n_shards:06d}.safetensors"
        tensors = {}
        for t in range(4):
            words = rng.integers(0, 2**64 - 1, size=per_tensor // 8, dtype=np.uint64, endpoint=True)
            tensors[f"model.layers.{i}.t{t}.weight"] = words.view(np.uint8)
            weight_map[f"model.layers.{i}.t{t}.weight"] = name
            total += per_tensor
        blob = st_save(tensors, metadata={"format": "pt"})
        (tree / name).write_bytes(blob)
        files[name] = blob
        del tensors, blob
    index = json.dumps({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
                       indent=2).encode() + b"\n"
    config = json.dumps({"architectures": ["BenchForCausalLM"], "model_type": "bench", "hidden_size": 1024,
                         "num_hidden_layers": n_shards, "vocab_size": 32000}, indent=2).encode() + b"\n"
    for name, data in (("model.safetensors.index.json", index), ("config.json", config)):
        (tree / name).write_bytes(data)
        files[name] = data
    manifest_files = {}
    store_files = []
    (store / "blobs").mkdir(parents=True)
    for name, data in sorted(files.items()):
        sha = hashlib.sha256(data).hexdigest()
        lfs = name.endswith(".safetensors")
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {len(data)}\n".encode()
        blob_id = _git_blob_sha1(pointer if lfs else data)
        manifest_files[name] = {"size": len(data), "sha256": sha, "hub_id": blob_id, "lfs": lfs, "stat": None}
        entry = {"path": name, "size": len(data), "blob_id": blob_id, "lfs": None}
        if lfs:
            entry["lfs"] = {"sha256": sha, "size": len(data), "pointer_size": len(pointer)}
        store_files.append(entry)
        os.link(tree / name, store / "blobs" / sha)
    files.clear()
    commit = hashlib.sha1(json.dumps(store_files, sort_keys=True).encode()).hexdigest()  # nosec B324 - an id
    (store / "store" / BENCH_REPO).mkdir(parents=True)
    (store / "store" / BENCH_REPO / "repo.json").write_text(json.dumps({
        "repo_id": BENCH_REPO, "repo_type": "model", "gated": False, "private": False,
        "refs": {"branches": {"main": commit}, "tags": {}},
        "commits": {commit: {"parents": [], "date": "2026-01-15T10:00:00.000Z", "title": "bench",
                             "files": store_files}}}, indent=1) + "\n")
    (tree / ".gpufleet").mkdir()
    (tree / ".gpufleet" / "manifest.json").write_text(json.dumps({
        "format": 1, "repo_id": BENCH_REPO, "repo_type": "model", "revision": "main", "commit": commit,
        "endpoint": None, "written_at": "2026-01-15T10:00:00Z", "files": manifest_files}, indent=1) + "\n")
    (root / "commit.json").write_text(json.dumps({"commit": commit}) + "\n")
    _stamp(root, stamp)
    print(f"real tree: {n_shards} x 256 MiB shards in {time.monotonic() - start:.1f} s", flush=True)
    return tree, store, commit


# ------------------------------------------------------------------------------------- measures


def floor_quick(tree: pathlib.Path) -> float:
    """What quick cannot go below: every header opened with safetensors and the index loaded."""
    start = time.monotonic()
    with open(tree / "model.safetensors.index.json", "rb") as handle:
        json.load(handle)
    for shard in sorted(tree.glob("*.safetensors")):
        with safe_open(str(shard), "numpy") as handle:
            handle.keys()
    return time.monotonic() - start


def warm(paths) -> None:
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while handle.read(16 << 20):
                pass


def openssl_parallel(paths, workers: int) -> float:
    """Wall time of `openssl dgst -sha256` over ``paths``, split over ``workers`` processes."""
    groups = [[] for dummy in range(workers)]
    sizes = [0] * workers
    for path in sorted(paths, key=os.path.getsize, reverse=True):
        i = sizes.index(min(sizes))
        groups[i].append(str(path))
        sizes[i] += os.path.getsize(path)
    start = time.monotonic()
    procs = [subprocess.Popen(["openssl", "dgst", "-sha256", *g], stdout=subprocess.DEVNULL)
             for g in groups if g]
    for proc in procs:
        if proc.wait(timeout=600) != 0:
            raise SystemExit("openssl dgst failed")
    return time.monotonic() - start


def start_hub(store: pathlib.Path, log: pathlib.Path):
    cmd = [sys.executable, str(HERE / "hub" / "server.py"), "--store", str(store), "--api", "127.0.0.1:0",
           "--cdn", "127.0.0.2:0", "--log", str(log)]
    try:
        proc, info = ready.start(cmd, ready_file=log.parent / "ready.json", what="the lab Hub")
    except ready.NotReady as exc:
        raise SystemExit(str(exc)) from None
    return proc, info["api"]


def stop_hub(proc) -> None:
    ready.stop(proc)


def hf_verify(api_url: str, commit: str, tree: pathlib.Path) -> tuple:
    from huggingface_hub import HfApi

    start = time.monotonic()
    res = HfApi(endpoint=api_url, token=False).verify_repo_checksums(BENCH_REPO, revision=commit, local_dir=tree)
    took = time.monotonic() - start
    if res.mismatches or res.missing_paths:
        raise SystemExit(f"verify_repo_checksums disagrees: {res.mismatches} missing {res.missing_paths}")
    return took, res.checked_count


# ------------------------------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per measure; the best counts")
    ap.add_argument("--real-gib", type=int, default=2, help="GiB of real shards for the full-mode figures")
    ap.add_argument("--out", default=str(REPO / "bench-results"))
    args = ap.parse_args(argv)
    runs = max(1, args.runs)
    verify = _import_verify()
    cores = len(os.sched_getaffinity(0))

    # --- quick on the sparse tree
    sparse = ensure_sparse()
    floor_quick(sparse)  # page cache warm for both sides
    floors = [floor_quick(sparse) for dummy in range(runs)]
    quick_runs = []
    for dummy in range(runs):
        res = verify.verify(str(sparse), mode="quick")
        if not res["ok"]:
            raise SystemExit(f"quick on the sparse tree found problems: {res['problems'][:3]}")
        quick_runs.append(res["duration"])
    quick_res = res
    apparent = sum(os.path.getsize(p) for p in sparse.glob("*.safetensors"))

    # --- full on real shards, vs openssl and vs huggingface_hub
    tree, store, commit = ensure_real(args.real_gib)
    shards = sorted(tree.glob("*.safetensors"))
    all_files = shards + [tree / "model.safetensors.index.json", tree / "config.json"]
    nbytes = sum(os.path.getsize(p) for p in all_files)
    warm(all_files)
    statcache = tree / ".gpufleet" / "statcache.json"
    hub_dir = pathlib.Path(tempfile.mkdtemp(prefix="bench-verify-hub-"))
    old_env = {k: os.environ.get(k) for k in ("HF_HOME", "HF_HUB_DISABLE_TELEMETRY", "HF_HUB_DISABLE_PROGRESS_BARS")}
    os.environ.update(HF_HOME=str(hub_dir / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    proc, api_url = start_hub(store, hub_dir / "requests.jsonl")
    full_runs, openssl_runs, hf_runs = [], [], []
    try:
        # Interleaved rounds: a neighbour's load spike then hits every contender alike.
        for dummy in range(runs):
            res = verify.verify(str(tree), mode="full")
            if not res["ok"]:
                raise SystemExit(f"full on the real tree found problems: {res['problems'][:3]}")
            full_runs.append(res["duration"])
            full_res = res
            openssl_runs.append(openssl_parallel(all_files, cores))
            took, checked = hf_verify(api_url, commit, tree)
            hf_runs.append(took)
    finally:
        stop_hub(proc)
        shutil.rmtree(hub_dir, ignore_errors=True)
        for key, value in old_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    # --- auto with nothing changed (the stat cache full just wrote vouches for every shard)
    if not statcache.exists():
        raise SystemExit("full did not write the stat cache")
    auto_runs = []
    for dummy in range(max(runs, 5)):
        res = verify.verify(str(tree), mode="auto")
        if not res["ok"] or any(h.endswith(".safetensors") for h in res["hashed"]):
            raise SystemExit(f"auto re-hashed shards with nothing changed: {res['hashed']}")
        auto_runs.append(res["duration"])
    auto_res = res

    best = min
    q, f, o, h, a = best(quick_runs), best(full_runs), best(openssl_runs), best(hf_runs), best(auto_runs)
    mib = nbytes / 2**20
    results = {
        "machine": {"cores": cores, "python": sys.version.split()[0]},
        "quick_sparse": {
            "shards": quick_res["shards"], "tensors": quick_res["tensors"], "apparent_bytes": apparent,
            "floor_seconds": [round(x, 4) for x in floors], "quick_seconds": [round(x, 4) for x in quick_runs],
            "ratio_to_floor": round(q / best(floors), 2), "goal": "<= 3x the floor (< 2 s)",
            "met": q <= 3 * best(floors) and q < 2.0,
        },
        "full_real": {
            "bytes": nbytes, "files": len(all_files), "hash_workers": cores,
            "model_verify_seconds": [round(x, 4) for x in full_runs],
            "model_verify_MiB_s": round(mib / f, 1),
            "openssl_parallel_seconds": [round(x, 4) for x in openssl_runs],
            "openssl_MiB_s": round(mib / o, 1),
            "ratio_to_openssl": round(o / f, 3), "goal_openssl": ">= 0.9x OpenSSL's throughput",
            "met_openssl": o / f >= 0.9,
            "hf_verify_repo_checksums_seconds": [round(x, 4) for x in hf_runs],
            "hf_MiB_s": round(mib / h, 1), "hf_files_checked": checked,
            "ratio_to_hf": round(h / f, 2), "goal_hf": ">= 1.8x huggingface_hub's throughput",
            "met_hf": h / f >= 1.8,
            "bytes_hashed": full_res["bytes_hashed"],
        },
        "auto_unchanged": {
            "auto_seconds": [round(x, 5) for x in auto_runs], "full_seconds": round(f, 4),
            "fraction_of_full": round(a / f, 4), "goal": "<= 1% of full's time", "met": a / f <= 0.01,
            "bytes_hashed": auto_res["bytes_hashed"], "cached": auto_res["cached"],
        },
    }
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "verify.json").write_text(json.dumps(results, indent=2) + "\n")
    qs, fr, au = results["quick_sparse"], results["full_real"], results["auto_unchanged"]
    md = [
        "# model_verify benchmark",
        "",
        f"Machine: {cores} cores. Best of {runs} runs; model_verify times are its own in-process `duration`.",
        "",
        "| measure | model_verify | reference | ratio | goal | met |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| quick, sparse tree ({qs['shards']} shards, {qs['tensors']} tensors, {apparent / 1e9:.0f} GB apparent) "
        f"| {q:.3f} s | floor (64 safe_open + index) {best(floors):.3f} s | {qs['ratio_to_floor']}x | {qs['goal']} "
        f"| {'yes' if qs['met'] else 'NO'} |",
        f"| full, {nbytes / 2**30:.2f} GiB real shards, warm | {f:.3f} s = {fr['model_verify_MiB_s']} MiB/s "
        f"| openssl dgst -sha256 x{cores} procs {o:.3f} s = {fr['openssl_MiB_s']} MiB/s | {fr['ratio_to_openssl']}x "
        f"| {fr['goal_openssl']} | {'yes' if fr['met_openssl'] else 'NO'} |",
        f"| full vs huggingface_hub | {f:.3f} s | HfApi.verify_repo_checksums (loopback lab Hub) {h:.3f} s = "
        f"{fr['hf_MiB_s']} MiB/s | {fr['ratio_to_hf']}x | {fr['goal_hf']} | {'yes' if fr['met_hf'] else 'NO'} |",
        f"| auto, nothing changed | {a * 1000:.1f} ms | full {f:.3f} s | {au['fraction_of_full'] * 100:.2f}% "
        f"| {au['goal']} | {'yes' if au['met'] else 'NO'} |",
        "",
    ]
    (out / "verify.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
