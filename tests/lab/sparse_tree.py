"""A Kimi-K2.6-shaped model tree whose shards are sparse: ~589 GB apparent, a few MiB on disk.

Each shard is a valid safetensors file: 8-byte little-endian header length, a JSON header with
``dtype``/``shape``/``data_offsets`` for every tensor (contiguous, sorted offsets), then a data
region created with truncate() -- never written, so it reads back as zeros and takes no disk
space. This exercises structural verification (header parsing, size-vs-header checks, index
consistency) at the real scale: 64 shards, ~200,000 tensors, ~589 GB.

The header is written with the json module because the safetensors library would need the
tensor data in memory. Shapes are the real Kimi K2.6 INT4 shapes, except that the routed experts'
intermediate size is scaled so the total lands near --total-bytes for the requested tensor count.

Usage: python tests/lab/sparse_tree.py --out DIR [--shards 64] [--tensors 200000]
                                        [--total-bytes 589e9]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Dict, List, Tuple

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from fixtures import shard_name, target_config  # noqa: E402

DTYPE_BYTES = {"BF16": 2, "F32": 4, "I32": 4}
HIDDEN = 7168
VOCAB = 163840
LAYERS = 61
DENSE_FFN = 18432
MOE_FFN = 2048
SHARED_FFN = 2048
N_EXPERTS = 384

Tensor = Tuple[str, str, List[int]]  # name, dtype, shape


def _nbytes(dtype: str, shape: List[int]) -> int:
    n = DTYPE_BYTES[dtype]
    for dim in shape:
        n *= dim
    return n


def _attention(p: str) -> List[Tensor]:
    return [
        (p + "input_layernorm.weight", "BF16", [HIDDEN]),
        (p + "post_attention_layernorm.weight", "BF16", [HIDDEN]),
        (p + "self_attn.q_a_proj.weight", "BF16", [1536, HIDDEN]),
        (p + "self_attn.q_a_layernorm.weight", "BF16", [1536]),
        (p + "self_attn.q_b_proj.weight", "BF16", [64 * 192, 1536]),
        (p + "self_attn.kv_a_proj_with_mqa.weight", "BF16", [512 + 64, HIDDEN]),
        (p + "self_attn.kv_a_layernorm.weight", "BF16", [512]),
        (p + "self_attn.kv_b_proj.weight", "BF16", [64 * 256, 512]),
        (p + "self_attn.o_proj.weight", "BF16", [HIDDEN, 64 * 128]),
    ]


def _expert(p: str, ffn: int) -> List[Tensor]:
    # compressed-tensors pack-quantized INT4, group 32: 8 values per int32, one BF16 scale per
    # 32 input columns, plus the unpacked shape.
    out = []
    for proj, (rows, cols) in (("gate_proj", (ffn, HIDDEN)), ("up_proj", (ffn, HIDDEN)),
                               ("down_proj", (HIDDEN, ffn))):
        q = f"{p}{proj}."
        out += [(q + "weight_packed", "I32", [rows, cols // 8]),
                (q + "weight_scale", "BF16", [rows, cols // 32]),
                (q + "weight_shape", "I32", [2])]
    return out


def _fixed_tensors() -> Tuple[List[Tensor], List[Tensor], List[Tensor]]:
    head = [("language_model.model.embed_tokens.weight", "BF16", [VOCAB, HIDDEN])]
    tail = [("language_model.model.norm.weight", "BF16", [HIDDEN]),
            ("language_model.lm_head.weight", "BF16", [VOCAB, HIDDEN])]
    layer0 = _attention("language_model.model.layers.0.") + [
        ("language_model.model.layers.0.mlp.gate_proj.weight", "BF16", [DENSE_FFN, HIDDEN]),
        ("language_model.model.layers.0.mlp.up_proj.weight", "BF16", [DENSE_FFN, HIDDEN]),
        ("language_model.model.layers.0.mlp.down_proj.weight", "BF16", [HIDDEN, DENSE_FFN]),
    ]
    return head, layer0, tail


def _moe_layer_fixed(layer: int) -> List[Tensor]:
    p = f"language_model.model.layers.{layer}."
    return _attention(p) + [
        (p + "mlp.gate.weight", "BF16", [N_EXPERTS, HIDDEN]),
        (p + "mlp.gate.e_score_correction_bias", "F32", [N_EXPERTS]),
        (p + "mlp.shared_experts.gate_proj.weight", "BF16", [SHARED_FFN, HIDDEN]),
        (p + "mlp.shared_experts.up_proj.weight", "BF16", [SHARED_FFN, HIDDEN]),
        (p + "mlp.shared_experts.down_proj.weight", "BF16", [HIDDEN, SHARED_FFN]),
    ]


def plan_tensors(n_tensors: int, total_bytes: int) -> List[Tensor]:
    """Exactly ``n_tensors`` tensors in checkpoint order, summing to about ``total_bytes``."""
    head, layer0, tail = _fixed_tensors()
    fixed = head + layer0 + tail
    for layer in range(1, LAYERS):
        fixed += _moe_layer_fixed(layer)
    per_expert = len(_expert("", MOE_FFN))
    expert_slots = n_tensors - len(fixed)
    if expert_slots < 0:
        raise ValueError(f"--tensors must be at least {len(fixed)} (the non-expert tensors)")
    n_experts_total = -(-expert_slots // per_expert)  # ceil; the surplus is trimmed below
    fixed_bytes = sum(_nbytes(d, s) for tname, d, s in fixed)
    # Bytes of one expert as a function of its intermediate size f: a*f + 24 (see _expert).
    per_f = sum(_nbytes(d, s) for tname, d, s in _expert("", 32)) / 32 - 24 / 32
    budget = total_bytes - fixed_bytes
    ffn = int(budget / n_experts_total / per_f) // 32 * 32 if n_experts_total else MOE_FFN
    if ffn < 32:
        minimum = fixed_bytes + n_experts_total * (per_f * 32 + 24)
        raise ValueError(f"--total-bytes must be at least {minimum:.4g} for {n_tensors} tensors "
                         "(the real Kimi shapes of the non-expert tensors alone need most of it)")
    experts_per_layer = [n_experts_total // (LAYERS - 1)] * (LAYERS - 1)
    for i in range(n_experts_total % (LAYERS - 1)):
        experts_per_layer[i] += 1

    out = list(head) + list(layer0)
    for layer in range(1, LAYERS):
        out += _moe_layer_fixed(layer)
        for e in range(experts_per_layer[layer - 1]):
            out += _expert(f"language_model.model.layers.{layer}.mlp.experts.{e}.", ffn)
    # Rounding the expert count up may overshoot by up to 8 tensors: drop them from the end.
    del out[n_tensors - len(tail):]
    return out + tail


def _split(tensors: List[Tensor], shards: int) -> List[List[Tensor]]:
    """Contiguous chunks of roughly equal bytes, like a save_pretrained(max_shard_size=...)."""
    total = sum(_nbytes(d, s) for tname, d, s in tensors)
    target = total / shards
    chunks: List[List[Tensor]] = [[] for dummy in range(shards)]
    acc = 0
    for i, t in enumerate(tensors):
        remaining = len(tensors) - i
        idx = min(int(acc // target), shards - 1)
        # Never leave a later shard empty.
        idx = max(idx, shards - remaining)
        idx = min(idx, shards - 1)
        chunks[idx].append(t)
        acc += _nbytes(t[1], t[2])
    # Guarantee every shard has at least one tensor by borrowing from the left neighbour.
    for i in range(1, shards):
        while not chunks[i] and len(chunks[i - 1]) > 1:
            chunks[i].insert(0, chunks[i - 1].pop())
    if any(not c for c in chunks):
        raise ValueError("more shards than tensors")
    return chunks


def _write_shard(path: pathlib.Path, tensors: List[Tensor]) -> Tuple[int, int]:
    header: Dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in sorted(tensors):
        n = _nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the safetensors writer pads the header to 8 bytes
    size = 8 + len(raw) + offset
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little"))
        fh.write(raw)
        fh.truncate(size)  # the data region becomes a hole: apparent size exact, no blocks used
    os.replace(tmp, path)
    return size, offset


def make_sparse_tree(out: os.PathLike, shards: int = 64, tensors: int = 200_000,
                     total_bytes: int = 589_000_000_000) -> dict:
    """Write the sparse tree into ``out`` (created if missing); return figures about it."""
    start = time.monotonic()
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    planned = plan_tensors(tensors, total_bytes)
    weight_map: Dict[str, str] = {}
    apparent = 0
    tensor_bytes = 0
    files = []
    for i, chunk in enumerate(_split(planned, shards), start=1):
        name = shard_name(i, shards)
        size, data = _write_shard(out / name, chunk)
        apparent += size
        tensor_bytes += data
        files.append({"name": name, "size": size, "tensors": len(chunk)})
        for tensor in chunk:
            weight_map[tensor[0]] = name
    index = {"metadata": {"total_size": tensor_bytes}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    config = target_config(2)
    config["_lab_fixture"] = ("gpufleet.llm lab sparse tree: real Kimi K2.6 shapes, "
                              "data regions are holes (zeros)")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return {
        "out": str(out),
        "shards": shards,
        "tensors": len(weight_map),
        "tensor_bytes": tensor_bytes,
        "apparent_bytes": apparent,
        "seconds": round(time.monotonic() - start, 2),
        "files": files,
    }


def _du(path: pathlib.Path, apparent: bool) -> str:
    cmd = ["du", "-sh"] + (["--apparent-size"] if apparent else []) + [str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.split("\t")[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--out", required=True, help="directory to write (created if missing)")
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--tensors", type=int, default=200_000)
    parser.add_argument("--total-bytes", type=float, default=589e9)
    args = parser.parse_args(argv)
    try:
        stats = make_sparse_tree(args.out, args.shards, args.tensors, int(args.total_bytes))
    except (ValueError, OSError) as exc:
        print(f"sparse_tree: error: {exc}", file=sys.stderr)
        return 1
    out = pathlib.Path(stats["out"])
    print(f"sparse_tree: {out}: {stats['shards']} shards, {stats['tensors']} tensors, "
          f"{stats['apparent_bytes']} bytes apparent ({stats['tensor_bytes']} tensor bytes) "
          f"in {stats['seconds']}s; du -sh: {_du(out, False)}, "
          f"du -sh --apparent-size: {_du(out, True)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
