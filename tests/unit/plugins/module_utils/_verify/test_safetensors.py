# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_safetensors on real files written by the safetensors library."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from safetensors.numpy import save_file

from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import strays as _strays
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import safetensors as st


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"a": np.zeros((4, 4), np.float16), "b": np.ones(3, np.float32)}, str(path), metadata={"format": "pt"})
    return path


def test_clean_shard_sizes_add_up(shard):
    info = st.inspect_shard(str(shard), "model.safetensors")
    assert sorted(info.tensors) == ["a", "b"] and info.metadata == {"format": "pt"}
    assert info.data_len == 4 * 4 * 2 + 3 * 4
    assert info.size == os.path.getsize(shard) == 8 + info.header_len + info.data_len


@pytest.mark.parametrize("damage,needle", [
    (lambda b: b[:-1], "1 bytes missing"),
    (lambda b: b + b"xyz", "3 trailing bytes"),
    (lambda b: b"", "zero-byte"),
    (lambda b: b[:5], "too short for the 8-byte header length"),
    (lambda b: (2 ** 62).to_bytes(8, "little") + b[8:], "garbage length field"),
    (lambda b: (0).to_bytes(8, "little") + b[8:], "header length field is 0"),
    (lambda b: b[:8] + b"\xc3\x28" + b[10:], "not UTF-8"),
    (lambda b: b[:8] + b"{{" + b[10:], "not JSON"),
    (lambda b: b[:8] + b"[1" + b[10:], "not JSON"),
])
def test_damaged_shard_is_named_precisely(shard, damage, needle):
    raw = shard.read_bytes()
    shard.write_bytes(damage(raw))
    with pytest.raises(st.ShardError) as err:
        st.inspect_shard(str(shard), "model.safetensors")
    assert "model.safetensors" in str(err.value) and needle in str(err.value) and "re-fetch" in str(err.value)


def test_header_over_the_library_limit(shard):
    raw = shard.read_bytes()
    with open(shard, "wb") as handle:
        handle.write((st.MAX_HEADER + 8).to_bytes(8, "little") + raw[8:])
        handle.truncate(st.MAX_HEADER + 64)  # sparse: the length field fits the file
    with pytest.raises(st.ShardError, match="above safetensors' limit"):
        st.inspect_shard(str(shard), "model.safetensors")


def test_overlapping_offsets_rejected_by_the_library(shard):
    raw = shard.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header["a"]["data_offsets"] = [0, 32]  # overlaps b's [0, 12]; file length unchanged
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (n - len(text))
    shard.write_bytes(raw[:8] + text + raw[8 + n:])
    with pytest.raises(st.ShardError, match="data_offsets overlap or leave gaps"):
        st.inspect_shard(str(shard), "model.safetensors")


def test_index_parsing(tmp_path):
    root = str(tmp_path)
    with pytest.raises(st.IndexError_, match="cannot be read"):
        st.load_index(root)
    idx = tmp_path / st.INDEX
    for text, needle in (("{", "not valid JSON"), ("[]", "not a JSON object"), ('{"weight_map": {}}', "empty"),
                         ('{"weight_map": {"a": 3}}', "no file name")):
        idx.write_text(text)
        with pytest.raises(st.IndexError_, match=needle):
            st.load_index(root)
    idx.write_text('{"weight_map": {"a": "x.safetensors"}, "metadata": {"total_size": 1.2e1}}')
    assert st.load_index(root) == ({"a": "x.safetensors"}, 12)
    idx.write_text('{"weight_map": {"a": "x.safetensors"}}')
    assert st.load_index(root) == ({"a": "x.safetensors"}, None)
    # issue 10 item 14d: total_size is advisory; the total_size check judges it, the index still parses.
    idx.write_text('{"weight_map": {"a": "x.safetensors"}, "metadata": {"total_size": 12.5}}')
    assert st.load_index(root) == ({"a": "x.safetensors"}, 12.5)
    idx.write_text('{"weight_map": {"a": "x.safetensors"}, "metadata": {"total_size": "12"}}')
    assert st.load_index(root) == ({"a": "x.safetensors"}, "12")


def test_find_weights(tmp_path):
    assert st.find_weights(str(tmp_path)) == (None, None)
    (tmp_path / st.SINGLE).write_bytes(b"")
    assert st.find_weights(str(tmp_path)) == ("single", st.SINGLE)
    (tmp_path / st.INDEX).write_text("{}")
    assert st.find_weights(str(tmp_path)) == ("index", st.INDEX)


def test_resolve_shard(tmp_path):
    root = tmp_path / "m"
    root.mkdir()
    (root / "a.safetensors").write_bytes(b"x")
    (root / "sub").mkdir()
    os.symlink("a.safetensors", root / "inside.safetensors")
    os.symlink(str(tmp_path / "out.safetensors"), root / "out.safetensors")
    (tmp_path / "out.safetensors").write_bytes(b"x")
    os.symlink("gone.safetensors", root / "dangling.safetensors")
    assert st.resolve_shard(str(root), "a.safetensors").endswith("a.safetensors")
    assert st.resolve_shard(str(root), "inside.safetensors")
    for rel, needle in (("out.safetensors", "symlink to .*outside"), ("dangling.safetensors", "dangling symlink"),
                        ("missing.safetensors", "is missing"), ("sub", "not a regular file"),
                        ("../x.safetensors", "unsafe shard name"), ("/etc/passwd", "unsafe shard name")):
        with pytest.raises(st.ShardError, match=needle):
            st.resolve_shard(str(root), rel)


def test_cross_check_groups_per_shard():
    weight_map = {"t%d" % i: "s1" for i in range(100)}
    weight_map.update({"u": "s2", "dup": "s2"})
    shards = {"s1": ["t%d" % i for i in range(1, 100)] + ["extra", "dup"], "s2": ["u", "dup"]}
    problems = st.cross_check(weight_map, shards)
    text = "\n".join(problems)
    assert "s1: 1 tensor(s) that model.safetensors.index.json maps to it are not in its header" in text
    assert "s1: 1 tensor(s) in its header are not in" in text and "extra" in text
    assert "tensor dup is in the headers of 2 shards (s1, s2)" in text
    assert st.cross_check(weight_map, {"s1": ["t%d" % i for i in range(100)], "s2": ["u", "dup"]}) == []


def test_walk_and_partials(tmp_path):
    (tmp_path / ".gpufleet").mkdir()
    (tmp_path / ".gpufleet" / "manifest.json").write_text("{}")
    (tmp_path / ".cache" / "huggingface").mkdir(parents=True)
    (tmp_path / ".cache" / "huggingface" / "x.incomplete").write_text("")
    (tmp_path / "a.safetensors.aria2").write_text("")
    (tmp_path / "config.json").write_text("{}")
    os.symlink(str(tmp_path / ".cache"), tmp_path / "linkdir")
    files = st.walk_files(str(tmp_path))
    assert files == [".cache/huggingface/x.incomplete", "a.safetensors.aria2", "config.json", "linkdir"]
    assert [f for f in files if _strays.is_partial(f)] == [".cache/huggingface/x.incomplete", "a.safetensors.aria2"]


def test_walk_skips_the_manifest_meta_dir_and_git(tmp_path):
    # The skipped name is _manifest's own: a file under META_DIR is never a model file.
    (tmp_path / _manifest.META_DIR / "staging").mkdir(parents=True)
    (tmp_path / _manifest.META_DIR / "staging" / "model.safetensors").write_text("")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("")
    (tmp_path / "sub" / _manifest.META_DIR).mkdir(parents=True)
    (tmp_path / "sub" / _manifest.META_DIR / "x").write_text("")
    # Only the top-level META_DIR is ours; a nested one is part of the model tree.
    assert st.walk_files(str(tmp_path)) == ["sub/%s/x" % _manifest.META_DIR]
