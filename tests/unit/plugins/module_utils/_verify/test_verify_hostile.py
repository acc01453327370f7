# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile input never crashes model_verify (issue 10 item 13): each becomes one problem line naming the
file and the fix, and the rest of the report survives. Then a seeded fuzz over shard headers, config.json
files and the index asserts that no exception escapes and every case yields a report.

Faults are driven by bytes and events only: the FIFO case blocks a writer thread on the FIFO and
releases it afterwards, so the test neither hangs on a broken reader nor waits on a clock.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time

import pytest
from safetensors.numpy import save_file

from ansible_collections.gpufleet.llm.plugins.module_utils._common import jsonfile as _jsonfile
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import safetensors as _safetensors
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import verify as _verify
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import model_trees as mt

INDEX = "model.safetensors.index.json"
S1 = mt.shard_name(1)


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("golden"))
    mt.make_golden(base)
    return base


@pytest.fixture()
def trees(golden, tmp_path):
    return mt.fresh_copy(golden, str(tmp_path / "models"), manifest=False)


def _mentions(res, needle):
    return [p for p in res["problems"] if needle in p]


def _report_survives(res):
    """The module can return it, and the steps after the fault still ran."""
    json.dumps(res)
    names = [c["name"] for c in res["checks"]]
    assert "config" in names and "index" in names and "headers" in names, names


def _rewrite_header(path, header):
    """Replace the shard's header JSON with ``header`` (text), keeping the 8-byte length field honest."""
    with open(path, "rb") as handle:
        raw = handle.read()
    old_len = int.from_bytes(raw[:8], "little")
    data = header.encode()
    with open(path, "wb") as handle:
        handle.write(len(data).to_bytes(8, "little") + data + raw[8 + old_len:])


def test_data_offsets_overflow(trees):
    """JSON reads 1e400 as inf; int(inf) raised OverflowError and lost the whole report."""
    target, _drafter = trees
    path = os.path.join(target, S1)
    header = _safetensors_header(path)
    name = next(k for k in header if k != "__metadata__")
    text = json.dumps(header).replace(json.dumps(header[name]["data_offsets"]), "[0, 1e400]", 1)
    _rewrite_header(path, text)
    res = _verify.verify(target, mode="quick")
    hits = _mentions(res, S1)
    assert len(hits) == 1 and "has no valid data_offsets" in hits[0] and "re-fetch" in hits[0], res["problems"]
    _report_survives(res)


@pytest.mark.parametrize("total", ["1" + "0" * 400, "1e400", "-1e400"])
def test_index_total_size_beyond_floats_is_a_notice(trees, total):
    """An integer of 401 digits parses (below Python's 4300-digit limit) but does not fit a float:
    formatting its difference with %g raised OverflowError and lost the report."""
    target, _drafter = trees
    with open(os.path.join(target, INDEX)) as handle:
        index = json.load(handle)
    text = json.dumps(index).replace(json.dumps(index["metadata"]["total_size"]), total, 1)
    with open(os.path.join(target, INDEX), "w") as handle:
        handle.write(text)
    res = _verify.verify(target, mode="quick")
    notices = [w for w in res["notices"] if "metadata.total_size" in w]
    assert len(notices) == 1 and len(notices[0]) < 600, res["notices"]
    _report_survives(res)


def test_manifest_hub_id_not_a_string(trees):
    """A custom manifest whose hub_id is a number: the id is unusable, never an AttributeError."""
    target, _drafter = trees
    manifest = os.path.join(target, ".gpufleet", "manifest.json")
    os.makedirs(os.path.dirname(manifest), exist_ok=True)
    files = {"config.json": {"size": os.path.getsize(os.path.join(target, "config.json")), "sha256": None,
                             "hub_id": 5, "lfs": False}}
    with open(manifest, "w") as handle:
        json.dump({"format": 1, "commit": "0" * 40, "files": files}, handle)
    res = _verify.verify(target, mode="quick", manifest=manifest)
    json.dumps(res)
    assert any("config.json" in w and "no hash" in w for w in res["notices"]), res


def _safetensors_header(path):
    with open(path, "rb") as handle:
        n = int.from_bytes(handle.read(8), "little")
        return json.loads(handle.read(n))


@pytest.mark.parametrize("depth", [100_000, 200])
def test_deep_nesting_in_a_header(trees, depth):
    target, _drafter = trees
    _rewrite_header(os.path.join(target, S1), '{"x": ' + "[" * depth + "]" * depth + "}")
    res = _verify.verify(target, mode="quick")
    hits = _mentions(res, S1)
    assert len(hits) == 1 and "corrupt" in hits[0] and "re-fetch" in hits[0], res["problems"]
    _report_survives(res)


@pytest.mark.parametrize("name,needle", [("config.json", "config.json nests deeper than 64 levels"),
                                         (INDEX, INDEX + " nests deeper than 64 levels")])
@pytest.mark.parametrize("depth", [100_000, 200])
def test_deep_nesting_in_config_and_index(trees, name, needle, depth):
    target, _drafter = trees
    with open(os.path.join(target, name), "w") as handle:
        handle.write('{"weight_map": {"a": "b"}, "x": ' + "[" * depth + "]" * depth + "}")
    res = _verify.verify(target, mode="quick")
    hits = _mentions(res, name)
    assert len(hits) == 1 and needle in hits[0] and "re-fetch" in hits[0], res["problems"]
    _report_survives(res)


def test_jmespath_error_at_evaluation(trees):
    target, _drafter = trees
    expect = {"length(missing)": 3, "text_config.num_hidden_layers": 61, "model_type": "other"}
    res = _verify.verify(target, mode="quick", expect=expect)
    hits = _mentions(res, "length(missing)")
    assert len(hits) == 1 and "cannot be evaluated" in hits[0] and "fix the expression" in hits[0], res["problems"]
    assert len(_mentions(res, "expect model_type")) == 1  # the other expectations were still judged
    assert [d["ok"] for d in res["expect"]] == [False, False, True]
    _report_survives(res)


@pytest.mark.parametrize("archs", [1, "DFlashDraftModel", {"a": 1}, [1]])
def test_architectures_not_a_list_of_names(trees, archs):
    target, drafter = trees
    for tree in (target, drafter):
        with open(os.path.join(tree, "config.json")) as handle:
            cfg = json.load(handle)
        cfg["architectures"] = archs
        with open(os.path.join(tree, "config.json"), "w") as handle:
            json.dump(cfg, handle)
    res = _verify.verify(target, mode="quick")
    hits = _mentions(res, "architectures is")
    assert len(hits) == 1 and hits[0].startswith("config.json: ") and "re-fetch" in hits[0], res["problems"]
    dres = _verify.verify(drafter, mode="quick", target=target)
    assert any("not a DFlash drafter config" in p for p in dres["problems"]), dres["problems"]
    json.dumps(dres)


def test_config_is_a_fifo(trees):
    """Before the fix open() waited for a writer: here one comes, so the old code read a valid config."""
    target, _drafter = trees
    path = os.path.join(target, "config.json")
    with open(path, "rb") as handle:
        good = handle.read()
    os.unlink(path)
    os.mkfifo(path)
    wrote = []

    def writer():
        fd = os.open(path, os.O_WRONLY)  # blocks until a reader opens the FIFO
        try:
            wrote.append(os.write(fd, good))
        finally:
            os.close(fd)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        res = _verify.verify(target, mode="quick")
    finally:
        release = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # lets a still-blocked writer finish
        thread.join()
        os.close(release)
    hits = _mentions(res, "config.json")
    assert len(hits) == 1 and "config.json is a FIFO, not a regular file" in hits[0], res["problems"]
    _report_survives(res)


@pytest.mark.parametrize("name", ["config.json", INDEX])
def test_symlink_to_dev_zero(trees, name):
    target, _drafter = trees
    os.unlink(os.path.join(target, name))
    os.symlink("/dev/zero", os.path.join(target, name))
    res = _verify.verify(target, mode="quick")
    hits = _mentions(res, name + " is a character device, not a regular file")
    assert len(hits) == 1 and "re-fetch" in hits[0], res["problems"]
    _report_survives(res)


@pytest.mark.parametrize("name", ["config.json", INDEX])
def test_json_file_over_the_cap(trees, name):
    target, _drafter = trees
    with open(os.path.join(target, name), "r+b") as handle:
        handle.truncate(_jsonfile.MAX_BYTES + 1)  # sparse: no 64 MiB written
    res = _verify.verify(target, mode="quick")
    hits = _mentions(res, "more than the 64 MiB")
    assert len(hits) == 1 and hits[0].startswith(name + " is %d bytes" % (_jsonfile.MAX_BYTES + 1)), res["problems"]
    _report_survives(res)


def test_symlinked_json_into_the_tree_still_reads(trees):
    """Symlinks are legitimate (the huggingface_hub cache links every file into blobs/): the target is judged."""
    target, _drafter = trees
    blobs = os.path.join(target, "blobs")
    os.makedirs(blobs)
    shutil.move(os.path.join(target, "config.json"), os.path.join(blobs, "c1"))
    os.symlink(os.path.join("blobs", "c1"), os.path.join(target, "config.json"))
    assert _verify.verify(target, mode="quick")["config"]["layers"] == mt.TARGET_LAYERS


def test_reader_unit(tmp_path):
    path = str(tmp_path / "x.json")
    with pytest.raises(_jsonfile.JsonFileError) as exc:
        _jsonfile.read_json_file(path)
    assert exc.value.missing and str(exc.value) == "is missing"
    os.symlink("nowhere", path)
    with pytest.raises(_jsonfile.JsonFileError, match="dangling symlink") as exc:
        _jsonfile.read_json_file(path)
    assert not exc.value.missing
    os.unlink(path)
    os.mkdir(path)
    with pytest.raises(_jsonfile.JsonFileError, match="is a directory, not a regular file"):
        _jsonfile.read_json_file(path)
    os.rmdir(path)
    with open(path, "w") as handle:
        handle.write('{"a": [1, {"b": 2}]}')
    assert _jsonfile.read_json_file(path) == {"a": [1, {"b": 2}]}
    with pytest.raises(_jsonfile.JsonFileError, match="nests deeper than 2 levels"):
        _jsonfile.read_json_file(path, max_depth=2)
    with pytest.raises(_jsonfile.JsonFileError, match="is 20 bytes, more than"):
        _jsonfile.read_json_file(path, max_bytes=19)


# --- fuzz -------------------------------------------------------------------------------------------

FUZZ_CASES = 2000
HOSTILE_VALUES = [1e400, -1e400, float("nan"), 10 ** 30, -1, 0, True, None, "", "x" * 300, [], {}, [[[[[]]]]],
                  {"a": {"b": {"c": {}}}}, [1, "2", None], "1e400", "../../etc/passwd", 2 ** 64,
                  10 ** 400]
HOSTILE_TEXT = [b"1e400", b"NaN", b"-Infinity", b"[" * 300, b"{\"a\":", b"\"", b"\\u0000", b"\xff\xfe",
                b"99999999999999999999999", b"true", b"null", b",", b"}", b"]", b"\x00" * 8]


def _mutate_json_value(rng, data):
    """Replace one random value (or key) somewhere inside ``data`` with a hostile one."""
    node = data
    for _step in range(rng.randint(0, 4)):
        if isinstance(node, dict) and node:
            key = rng.choice(sorted(node))
            if not isinstance(node[key], (dict, list)):
                break
            node = node[key]
        elif isinstance(node, list) and node:
            idx = rng.randrange(len(node))
            if not isinstance(node[idx], (dict, list)):
                break
            node = node[idx]
    value = rng.choice(HOSTILE_VALUES)
    if isinstance(node, dict) and node:
        key = rng.choice(sorted(node))
        if rng.random() < 0.2:
            node[str(rng.choice(HOSTILE_VALUES))] = node.pop(key)
        else:
            node[key] = value
    elif isinstance(node, list) and node:
        node[rng.randrange(len(node))] = value
    else:
        return value
    return data


def _mutate_bytes(rng, raw, start, end):
    """A byte-level mutation of raw[start:end] (a JSON text region)."""
    pos = rng.randint(start, max(start, end - 1))
    op = rng.randrange(4)
    if op == 0:
        return raw[:pos] + bytes([rng.randrange(256)]) + raw[pos + 1:]
    if op == 1:
        return raw[:pos] + rng.choice(HOSTILE_TEXT) + raw[pos:]
    if op == 2:
        return raw[:pos] + raw[pos + rng.randint(1, 40):]
    return raw[:pos]


def _mutate_shard(rng, raw):
    n = int.from_bytes(raw[:8], "little")
    roll = rng.random()
    if roll < 0.15:
        return rng.randrange(2 ** 64).to_bytes(8, "little") + raw[8:]
    if roll < 0.6:
        try:
            header = json.loads(raw[8:8 + n])
        except (ValueError, RecursionError):  # an earlier mutation of this case broke it already
            return raw
        text = json.dumps(_mutate_json_value(rng, header)).encode()
        return len(text).to_bytes(8, "little") + text + raw[8 + n:]
    out = _mutate_bytes(rng, raw, 8, 8 + n)
    if rng.random() < 0.5:  # keep the length field honest so the header itself is what is judged
        delta = len(out) - len(raw)
        out = max(0, n + delta).to_bytes(8, "little") + out[8:]
    return out


def _mutate(rng, name, raw):
    if name.endswith(".safetensors"):
        return _mutate_shard(rng, raw)
    if rng.random() < 0.6:
        try:
            return json.dumps(_mutate_json_value(rng, json.loads(raw))).encode()
        except (ValueError, RecursionError):
            return raw
    return _mutate_bytes(rng, raw, 0, len(raw))


def test_fuzz_no_exception_escapes(trees, record_property):
    target, drafter = trees
    victims = [(target, "config.json"), (target, INDEX), (target, S1), (target, mt.shard_name(3)),
               (drafter, "config.json"), (drafter, "model.safetensors")]
    originals = {}
    for root, name in victims:
        with open(os.path.join(root, name), "rb") as handle:
            originals[(root, name)] = handle.read()
    expects = {target: {"text_config.num_hidden_layers": 61, "length(architectures)": 1},
               drafter: {"max(dflash_config.target_layer_ids)": 58, "length(architectures)": 1}}
    extra = {target: {}, drafter: {"target": target}}
    for root in expects:
        assert _verify.verify(root, mode="quick", expect=expects[root], **extra[root])["ok"]
    rng = random.Random(10013)
    outcomes = {"ok": 0, "problems": 0}
    start = time.monotonic()
    for case in range(FUZZ_CASES):
        root, name = rng.choice(victims)
        raw = originals[(root, name)]
        for _round in range(rng.randint(1, 3)):
            raw = _mutate(rng, name, raw)
        with open(os.path.join(root, name), "wb") as handle:
            handle.write(raw)
        try:
            res = _verify.verify(root, mode="quick", expect=expects[root], **extra[root])
        except Exception as exc:  # pragma: no cover - the failure this test exists to report
            pytest.fail("case %d (%s/%s, seed 10013) raised %s: %s; input: %r"
                        % (case, os.path.basename(root), name, type(exc).__name__, exc, raw[:300]))
        if (root, name) == (target, "config.json"):  # the drafter step reads the target's config too
            json.dumps(_verify.verify(drafter, mode="quick", target=target))
        json.dumps(res)
        assert isinstance(res["problems"], list) and all(isinstance(p, str) for p in res["problems"])
        assert all(len(p) < 2000 for p in res["problems"]), [p[:200] for p in res["problems"]]
        outcomes["ok" if res["ok"] else "problems"] += 1
        with open(os.path.join(root, name), "wb") as handle:
            handle.write(originals[(root, name)])
    record_property("fuzz_cases", FUZZ_CASES)
    record_property("fuzz_seconds", round(time.monotonic() - start, 1))
    print("fuzz: %d cases in %.1f s: %s" % (FUZZ_CASES, time.monotonic() - start, outcomes))
    # Mutations must mostly land (a fuzz whose cases all pass proves nothing), and some are harmless.
    assert FUZZ_CASES // 2 < outcomes["problems"] < FUZZ_CASES, outcomes


def test_module_side_shards_still_reported_with_safetensors(trees):
    """A fixed point of the fuzz: an empty header object is refused by safetensors and described by us."""
    target, _drafter = trees
    path = os.path.join(target, S1)
    _rewrite_header(path, "{}")
    res = _verify.verify(target, mode="quick")
    assert len(_mentions(res, S1 + ":")) >= 1
    save_file({}, path)  # a valid but empty shard: its missing tensors are reported, no crash
    res = _verify.verify(target, mode="quick")
    assert any("not in its header" in p for p in res["problems"]), res["problems"]
    assert _safetensors.inspect_shard(path, S1).tensors == []


def test_huge_names_stay_short_in_problem_lines(trees):
    """A header may hold a tensor name of a megabyte; a problem line names it in at most ~120 characters."""
    target, _drafter = trees
    path = os.path.join(target, S1)
    huge = "t" * 1_000_000
    save_file({huge: mt.np.zeros(2, dtype=mt.np.float16)}, path)
    res = _verify.verify(target, mode="quick")
    hits = _mentions(res, S1)
    assert hits and all(len(p) < 1000 for p in res["problems"]), [len(p) for p in res["problems"]]
    with open(os.path.join(target, INDEX), "w") as handle:
        json.dump({"weight_map": {huge: "x" * 5000}}, handle)
    res = _verify.verify(target, mode="quick")
    assert any("to no file name" in p for p in res["problems"]) and all(len(p) < 1000 for p in res["problems"])
