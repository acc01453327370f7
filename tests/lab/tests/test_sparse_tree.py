"""The sparse Kimi-shaped tree: valid safetensors headers, exact sizes, next to no disk use."""

import json
import pathlib
import subprocess
import sys

import pytest
from safetensors import SafetensorError, safe_open

LAB = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(LAB))

import sparse_tree  # noqa: E402

SHARDS, TENSORS, TOTAL = 4, 2000, 50_000_000_000


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    out = tmp_path_factory.mktemp("sparse")
    stats = sparse_tree.make_sparse_tree(out, shards=SHARDS, tensors=TENSORS, total_bytes=TOTAL)
    return out, stats


def test_headers_parse_and_sizes_are_exact(tree):
    out, stats = tree
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    assert shards == [f"model-0000{i}-of-000004.safetensors" for i in range(1, 5)]
    seen = {}
    tensor_bytes = 0
    apparent = 0
    for name in shards:
        path = out / name
        with safe_open(str(path), framework="numpy") as fh:
            keys = fh.keys()
            assert fh.metadata() == {"format": "pt"}
        with open(path, "rb") as fh:
            hlen = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(hlen))
        header.pop("__metadata__")
        assert sorted(header) == sorted(keys)
        end = 0
        for info in sorted(header.values(), key=lambda i: i["data_offsets"]):
            start, stop = info["data_offsets"]
            assert start == end
            n = {"BF16": 2, "F32": 4, "I32": 4}[info["dtype"]]
            for dim in info["shape"]:
                n *= dim
            assert stop - start == n
            end = stop
        size = path.stat().st_size
        assert size == 8 + hlen + end, "apparent size must equal header + data exactly"
        tensor_bytes += end
        apparent += size
        seen.update(dict.fromkeys(keys, name))
    assert len(seen) == TENSORS == stats["tensors"]
    assert seen == index["weight_map"]
    assert index["metadata"]["total_size"] == tensor_bytes == stats["tensor_bytes"]
    assert apparent == stats["apparent_bytes"]
    assert abs(apparent - TOTAL) / TOTAL < 0.01
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "kimi_k25" and cfg["text_config"]["num_hidden_layers"] == 61


def test_disk_use_stays_tiny(tree):
    out, stats = tree
    used = sum(p.stat().st_blocks * 512 for p in out.iterdir())
    assert stats["apparent_bytes"] > 40e9
    assert used < 4 << 20, f"{used} bytes on disk: data regions were written, not left as holes"


def test_real_kimi_names_and_int4_layout(tree):
    out = tree[0]
    names = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert "language_model.model.embed_tokens.weight" in names
    assert "language_model.lm_head.weight" in names
    layers = {int(k.split(".")[3]) for k in names if k.startswith("language_model.model.layers.")}
    assert layers == set(range(61))
    with safe_open(str(out / names["language_model.model.layers.5.mlp.experts.0.up_proj.weight_packed"]),
                   "numpy") as fh:
        packed = fh.get_slice("language_model.model.layers.5.mlp.experts.0.up_proj.weight_packed")
        scale = fh.get_slice("language_model.model.layers.5.mlp.experts.0.up_proj.weight_scale")
        assert packed.get_dtype() == "I32" and packed.get_shape()[1] == 7168 // 8
        assert scale.get_shape()[1] == 7168 // 32


def test_truncated_copy_is_rejected(tree, tmp_path):
    # Negative control: the same header over a shortened data region must not parse.
    out = tree[0]
    src = out / "model-00002-of-000004.safetensors"
    bad = tmp_path / src.name
    with open(src, "rb") as fh:
        hlen = int.from_bytes(fh.read(8), "little")
        fh.seek(0)
        head = fh.read(8 + hlen)
    with open(bad, "wb") as fh:
        fh.write(head)
        fh.truncate(src.stat().st_size - 1)
    with pytest.raises(SafetensorError):
        safe_open(str(bad), "numpy")


def test_cli_reports_figures_and_clean_errors(tmp_path):
    script = LAB / "sparse_tree.py"
    ok = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "t"), "--shards", "2",
                         "--tensors", "1000", "--total-bytes", "30e9"],
                        capture_output=True, text=True, timeout=120, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "1000 tensors" in ok.stdout and "du -sh --apparent-size" in ok.stdout
    bad = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "u"),
                          "--tensors", "10"], capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 1
    assert "error: --tensors must be at least" in bad.stderr
    assert "Traceback" not in bad.stderr
    small = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "v"),
                            "--total-bytes", "2e9"], capture_output=True, text=True, timeout=120, check=False)
    assert small.returncode == 1 and "--total-bytes must be at least" in small.stderr
