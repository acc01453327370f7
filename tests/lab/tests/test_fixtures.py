"""The fixture generator: determinism, safetensors validity, store == git, revision history."""

import hashlib
import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest
from safetensors import safe_open

LAB = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(LAB))

import fixtures  # noqa: E402

DTYPE_BYTES = {"F16": 2, "BF16": 2, "F32": 4, "I32": 4, "I64": 8, "U8": 1}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    # A private cache, so the test neither depends on nor disturbs the shared lab cache.
    return fixtures.ensure_fixtures(tmp_path_factory.mktemp("cache-a"))


@pytest.fixture(scope="module")
def summary(root):
    return json.loads((root / "fixtures.json").read_text())


def git(repo_dir, *args, text=True):
    return subprocess.run(["git", "-C", str(repo_dir), *args], check=True, capture_output=True,
                          text=text).stdout


def repo_json(root, repo_id):
    return json.loads((root / "store" / repo_id / "repo.json").read_text())


def read_at(root, repo_id, ref, path):
    return git(root / "git" / repo_id, "cat-file", "blob", f"{ref}:{path}", text=False)


def header(path):
    raw = pathlib.Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n]), raw


def test_deterministic_across_runs(root, summary, tmp_path):
    other = fixtures.ensure_fixtures(tmp_path / "cache-b")
    other_summary = json.loads((other / "fixtures.json").read_text())
    for repo_id, info in summary["repos"].items():
        assert other_summary["repos"][repo_id]["refs"] == info["refs"], repo_id
        assert other_summary["repos"][repo_id]["files"] == info["files"], repo_id
    assert sorted(p.name for p in (root / "blobs").iterdir()) == \
        sorted(p.name for p in (other / "blobs").iterdir())
    for repo_id in summary["repos"]:
        assert repo_json(root, repo_id) == repo_json(other, repo_id)


def test_ensure_is_idempotent(root):
    stamp = root / ".stamp.json"
    before = stamp.stat().st_mtime_ns
    again = fixtures.ensure_fixtures(root.parent)
    assert again == root
    assert stamp.stat().st_mtime_ns == before, "a matching stamp must skip regeneration"
    assert json.loads(stamp.read_text())["generator_version"] == fixtures.GENERATOR_VERSION


def test_repos_refs_and_tokens(root, summary):
    repos = summary["repos"]
    assert set(repos) == {fixtures.TARGET, fixtures.DRAFTER, fixtures.GATED}
    assert repos[fixtures.GATED]["gated"] is True
    assert repos[fixtures.TARGET]["gated"] is False
    assert repos[fixtures.TARGET]["refs"]["main"] != repos[fixtures.TARGET]["refs"]["v1.0"]
    # The gated copy has its own history, so a server mixing repos up cannot go unnoticed.
    assert repos[fixtures.GATED]["refs"]["main"] != repos[fixtures.TARGET]["refs"]["main"]
    tokens = json.loads((root / "tokens.json").read_text())
    assert {v["name"]: v["gated"] for v in tokens.values()} == {"lab-reader": True, "lab-no-gated": False}
    assert all(t.startswith("hf_lab") and len(t) == 37 for t in tokens)


@pytest.mark.parametrize("ref", ["v1.0", "main"])
def test_target_shards_and_index(root, tmp_path, ref):
    repo = fixtures.TARGET
    index = json.loads(read_at(root, repo, ref, "model.safetensors.index.json"))
    shards = sorted(set(index["weight_map"].values()))
    assert shards == [f"model-0000{i}-of-000004.safetensors" for i in range(1, 5)]
    total = 0
    seen = {}
    for shard in shards:
        path = tmp_path / shard
        path.write_bytes(read_at(root, repo, ref, shard))
        assert 4 << 20 <= path.stat().st_size <= 8 << 20, (shard, path.stat().st_size)
        with safe_open(str(path), framework="numpy") as fh:
            keys = list(fh.keys())
            assert fh.metadata() == {"format": "pt"}
        hdr, raw = header(path)
        hdr.pop("__metadata__")
        end = 0
        for name, info in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"]):
            start, stop = info["data_offsets"]
            assert start == end, f"{shard}:{name} not contiguous"
            n = DTYPE_BYTES[info["dtype"]]
            for dim in info["shape"]:
                n *= dim
            assert stop - start == n
            end = stop
            total += n
        assert 8 + int.from_bytes(raw[:8], "little") + end == len(raw)
        for key in keys:
            seen[key] = shard
    assert seen == index["weight_map"]
    assert index["metadata"]["total_size"] == total
    layers = {int(k.split(".")[3]) for k in seen if k.startswith("language_model.model.layers.")}
    assert layers == set(range(61))
    assert {"language_model.model.embed_tokens.weight", "language_model.model.norm.weight",
            "language_model.lm_head.weight"} <= set(seen)


def test_target_config_layout(root):
    cfg = json.loads(read_at(root, fixtures.TARGET, "main", "config.json"))
    assert cfg["model_type"] == "kimi_k25"
    assert cfg["architectures"] == ["KimiK25ForConditionalGeneration"]
    text = cfg["text_config"]
    assert (text["num_hidden_layers"], text["n_routed_experts"], text["hidden_size"],
            text["vocab_size"]) == (61, 384, 7168, 163840)
    weights = cfg["quantization_config"]["config_groups"]["group_0"]["weights"]
    assert cfg["quantization_config"]["quant_method"] == "compressed-tensors"
    assert (weights["num_bits"], weights["group_size"], weights["type"]) == (4, 32, "int")
    files = set(git(root / "git" / fixtures.TARGET, "ls-tree", "--name-only", "main").split())
    for target in cfg["auto_map"].values():
        assert f"{target.split('.')[0]}.py" in files
    assert {"tokenizer_config.json", "tiktoken.model", "generation_config.json",
            "chat_template.jinja"} <= files


def test_store_matches_git(root, summary):
    for repo_id, info in summary["repos"].items():
        store = repo_json(root, repo_id)
        git_dir = root / "git" / repo_id
        assert store["refs"]["branches"]["main"] == git(git_dir, "rev-parse", "main").strip()
        for tag, sha in store["refs"]["tags"].items():
            assert git(git_dir, "rev-parse", f"{tag}^{{commit}}").strip() == sha
        for sha, commit in store["commits"].items():
            parents = git(git_dir, "rev-list", "--parents", "-n", "1", sha).split()[1:]
            assert commit["parents"] == parents
            assert git(git_dir, "log", "-1", "--format=%s", sha).strip() == commit["title"]
            tree = {}
            for line in git(git_dir, "ls-tree", "-r", "-l", sha).splitlines():
                meta, path = line.split("\t", 1)
                _mode, _type, blob, size = meta.split()
                tree[path] = (blob, int(size))
            assert sorted(tree) == [f["path"] for f in commit["files"]]
            for f in commit["files"]:
                blob, size = tree[f["path"]]
                content = git(git_dir, "cat-file", "blob", blob, text=False)
                digest = hashlib.sha256(content).hexdigest()
                assert size == f["size"] == len(content)
                assert (root / "blobs" / digest).read_bytes() == content
                if f["lfs"] is None:
                    assert not f["path"].endswith(".safetensors")
                    assert f["blob_id"] == blob
                else:
                    assert f["path"].endswith(".safetensors")
                    pointer = fixtures.lfs_pointer(digest, size)
                    assert f["lfs"] == {"sha256": digest, "size": size,
                                        "pointer_size": len(pointer)}
                    assert f["blob_id"] == fixtures.git_blob_sha1(pointer)


def test_main_changes_exactly_one_shard_and_config(root, tmp_path):
    repo_dir = root / "git" / fixtures.TARGET
    changed = git(repo_dir, "diff", "--name-only", "v1.0", "main").split()
    assert changed == ["config.json", "model-00003-of-000004.safetensors"]
    old_cfg = json.loads(read_at(root, fixtures.TARGET, "v1.0", "config.json"))
    new_cfg = json.loads(read_at(root, fixtures.TARGET, "main", "config.json"))
    assert {k for k in new_cfg if new_cfg[k] != old_cfg.get(k)} == {"transformers_version"}
    shard = "model-00003-of-000004.safetensors"
    old, new = tmp_path / "old.st", tmp_path / "new.st"
    old.write_bytes(read_at(root, fixtures.TARGET, "v1.0", shard))
    new.write_bytes(read_at(root, fixtures.TARGET, "main", shard))
    assert old.stat().st_size == new.stat().st_size
    old_hdr, new_hdr = header(old)[0], header(new)[0]
    assert old_hdr == new_hdr, "same names, dtypes, shapes and offsets"
    with safe_open(str(old), "numpy") as a, safe_open(str(new), "numpy") as b:
        name = "language_model.model.layers.31.self_attn.o_proj.weight"
        assert a.get_tensor(name).shape == b.get_tensor(name).shape
        assert (a.get_tensor(name) != b.get_tensor(name)).any()


def test_drafter_matches_target(root, tmp_path):
    target = json.loads(read_at(root, fixtures.TARGET, "main", "config.json"))["text_config"]
    draft = json.loads(read_at(root, fixtures.DRAFTER, "main", "config.json"))
    assert draft["architectures"] == ["DFlashDraftModel"]
    assert draft["block_size"] == 16 and draft["num_hidden_layers"] == 5
    assert draft["num_target_layers"] == target["num_hidden_layers"] == 61
    assert draft["hidden_size"] == target["hidden_size"]
    assert draft["vocab_size"] == target["vocab_size"]
    assert draft["dflash_config"]["target_layer_ids"] == [1, 12, 24, 35, 47, 58]
    assert all(i < target["num_hidden_layers"] for i in draft["dflash_config"]["target_layer_ids"])
    assert draft["auto_map"]["AutoModel"].startswith("dflash.")
    # The stand-in dflash.py is importable without torch and agrees with the configs.
    module_path = tmp_path / "dflash.py"
    module_path.write_bytes(read_at(root, fixtures.DRAFTER, "main", "dflash.py"))
    assert 6000 <= module_path.stat().st_size <= 12000
    spec = importlib.util.spec_from_file_location("lab_dflash", module_path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]
    assert mod.check_compatible(draft, {"text_config": target}) == []
    assert mod.check_compatible({**draft, "hidden_size": 4096}, {"text_config": target})
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(read_at(root, fixtures.DRAFTER, "main", "model.safetensors"))
    assert 2 << 20 <= weights.stat().st_size <= 4 << 20
    with safe_open(str(weights), "numpy") as fh:
        assert "fc.weight" in fh.keys()
        assert not any("embed" in k or "lm_head" in k for k in fh.keys())


def test_gated_copy_has_target_content(root):
    for path in ("config.json", "model-00001-of-000004.safetensors",
                 "model.safetensors.index.json"):
        assert read_at(root, fixtures.GATED, "main", path) == \
            read_at(root, fixtures.TARGET, "main", path)
