# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Small Kimi-shaped target and DFlash drafter trees for the unit tests, made with safetensors.

The shapes of the real thing where verification looks (kimi_k25 config with text_config, a
sharded index with model-000NN-of-000004 names, a drafter with dflash_config and dflash.py), with
tensors of a few hundred bytes. Shards 2 and 3 have the same tensor shapes and name lengths, hence
the same size: swapping them is a same-size change only names reveal.

``make_golden(dir)`` writes both trees once; ``fresh_copy(golden, dest)`` copies them and writes
each tree's ``.gpufleet/manifest.json`` the way hf_snapshot does after fetching (sha256, size, git
blob id, LFS flag and the stat record of the verified file).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
from safetensors.numpy import save_file

from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest

TARGET_LAYERS = 61
HIDDEN = 7168
VOCAB = 163840
SHARDS = 4
MINI = 8  # tiny tensor edge


def shard_name(i, total=SHARDS):
    return "model-%05d-of-%06d.safetensors" % (i, total)


def target_config():
    return {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config",
                     "AutoModelForCausalLM": "modeling_kimi_k25.KimiK25ForConditionalGeneration"},
        "model_type": "kimi_k25",
        "text_config": {
            "model_type": "kimi_k2",
            "hidden_size": HIDDEN,
            "vocab_size": VOCAB,
            "num_hidden_layers": TARGET_LAYERS,
            "n_routed_experts": 384,
            "num_experts_per_tok": 8,
            "torch_dtype": "bfloat16",
        },
        "quantization_config": {"quant_method": "compressed-tensors"},
        "tie_word_embeddings": False,
    }


def drafter_config():
    return {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "block_size": 16,
        "dflash_config": {"mask_token_id": 163838, "target_layer_ids": [1, 12, 24, 35, 47, 58]},
        "hidden_size": HIDDEN,
        "vocab_size": VOCAB,
        "num_hidden_layers": 5,
        "num_target_layers": TARGET_LAYERS,
        "model_type": "qwen3",
    }


def _layer(rng, layer):
    p = "language_model.model.layers.%d." % layer
    return {
        p + "input_layernorm.weight": rng.standard_normal(MINI).astype(np.float16),
        p + "self_attn.o_proj.weight": rng.standard_normal((MINI, MINI)).astype(np.float16),
        p + "mlp.experts.0.down_proj.weight_packed": rng.integers(0, 2**31 - 1, (MINI, 2), dtype=np.int32),
        p + "mlp.experts.0.down_proj.weight_scale": rng.standard_normal((MINI, 1)).astype(np.float16),
    }


def target_shards():
    """{shard name: {tensor: array}}; layers 2-3 in shard 2 and 4-5 in shard 3 (same shapes, same sizes)."""
    rng = np.random.default_rng(20260115)
    shards = {}
    one = {"language_model.model.embed_tokens.weight": rng.standard_normal((16, MINI)).astype(np.float16)}
    one.update(_layer(rng, 0))
    one.update(_layer(rng, 1))
    shards[shard_name(1)] = one
    shards[shard_name(2)] = dict(list(_layer(rng, 2).items()) + list(_layer(rng, 3).items()))
    shards[shard_name(3)] = dict(list(_layer(rng, 4).items()) + list(_layer(rng, 5).items()))
    four = dict(list(_layer(rng, 6).items()) + list(_layer(rng, 7).items()))
    four["language_model.model.norm.weight"] = rng.standard_normal(MINI).astype(np.float16)
    four["language_model.lm_head.weight"] = rng.standard_normal((16, MINI)).astype(np.float16)
    shards[shard_name(4)] = four
    return shards


def write_index(root, shards, total=None):
    weight_map = {}
    nbytes = 0
    for name, tensors in shards.items():
        for tensor, array in tensors.items():
            weight_map[tensor] = name
            nbytes += array.nbytes
    index = {"metadata": {"total_size": nbytes if total is None else total},
             "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(root, "model.safetensors.index.json"), "w") as handle:
        json.dump(index, handle, indent=2)
    return index


def _write_json(path, data):
    with open(path, "w") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")


def make_target(root):
    os.makedirs(root)
    shards = target_shards()
    for name, tensors in shards.items():
        save_file(tensors, os.path.join(root, name), metadata={"format": "pt"})
    write_index(root, shards)
    _write_json(os.path.join(root, "config.json"), target_config())
    _write_json(os.path.join(root, "tokenizer_config.json"), {"tokenizer_class": "TikTokenTokenizer"})
    _write_json(os.path.join(root, "generation_config.json"), {"max_length": 262144})
    with open(os.path.join(root, "tiktoken.model"), "w") as handle:
        handle.write("IQ== 0\nIg== 1\n")
    with open(os.path.join(root, "configuration_kimi_k25.py"), "w") as handle:
        handle.write("class KimiK25Config:\n    model_type = 'kimi_k25'\n")
    with open(os.path.join(root, "modeling_kimi_k25.py"), "w") as handle:
        handle.write("class KimiK25ForConditionalGeneration:\n    pass\n")


def drafter_tensors():
    rng = np.random.default_rng(7)
    tensors = {"fc.weight": rng.standard_normal((MINI, 6 * MINI)).astype(np.float16),
               "norm.weight": rng.standard_normal(MINI).astype(np.float16)}
    for layer in range(5):
        tensors["layers.%d.self_attn.q_proj.weight" % layer] = rng.standard_normal((MINI, MINI)).astype(np.float16)
    return tensors


def make_drafter(root):
    os.makedirs(root)
    save_file(drafter_tensors(), os.path.join(root, "model.safetensors"), metadata={"format": "pt"})
    _write_json(os.path.join(root, "config.json"), drafter_config())
    with open(os.path.join(root, "dflash.py"), "w") as handle:
        handle.write("# DFlash drafter (unit-test stand-in)\nclass DFlashDraftModel:\n    block_size = 16\n")


def make_golden(base):
    """Write ``base/target`` and ``base/drafter``; returns (target, drafter) paths."""
    target = os.path.join(base, "target")
    drafter = os.path.join(base, "drafter")
    make_target(target)
    make_drafter(drafter)
    return target, drafter


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()  # nosec B324 - git's object id


def file_table(root, with_stat=True):
    """The manifest's files table for every file under ``root`` (outside .gpufleet)."""
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != _manifest.META_DIR]
        for name in filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            with open(path, "rb") as handle:
                data = handle.read()
            lfs = rel.endswith(".safetensors")
            sha = hashlib.sha256(data).hexdigest()
            files[rel] = {
                "size": len(data),
                "sha256": sha,
                # On the Hub an LFS file's id is its pointer's blob id; here any stable id will do.
                "hub_id": git_blob_sha1(data) if not lfs else git_blob_sha1(("oid sha256:%s\n" % sha).encode()),
                "lfs": lfs,
                "stat": _manifest.stat_record(path) if with_stat else None,
            }
    return files


def write_manifest(root, repo_id="gpufleet-test/model", with_stat=True):
    manifest = _manifest.new_manifest(repo_id, "model", "main", "c" * 40, "http://hub.invalid", file_table(root, with_stat))
    _manifest.write_manifest(root, manifest)
    return manifest


def fresh_copy(golden_base, dest_base, manifest=True):
    """Copy target and drafter into ``dest_base``; write their manifests as hf_snapshot would."""
    out = []
    for name in ("target", "drafter"):
        dest = os.path.join(dest_base, name)
        shutil.copytree(os.path.join(golden_base, name), dest)
        if manifest:
            write_manifest(dest, repo_id="gpufleet-test/" + name)
        out.append(dest)
    return tuple(out)
