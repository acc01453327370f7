# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_bench_report from real sglang_bench results: the speculative and the baseline run against
the lab's SGLang STAND-IN on loopback (not SGLang, no GPU: its figures come from its open delay
model and say nothing about GPU performance, which the report must say too). Checks that the files
exist and parse: the JSON against the report schema, the markdown table rows, the PNGs open with
the expected pixel size."""
from __future__ import annotations

import json
import os
import re

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._bench import plots
from ansible_collections.gpufleet.llm.plugins.module_utils._bench import report
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.modules import sglang_bench, sglang_bench_report
from ansible_collections.gpufleet.llm.tests.unit.plugins.modules.module_runner import run_module
from ansible_collections.gpufleet.llm.tests.unit.plugins.standin import (  # noqa: F401 pylint: disable=unused-import
    ROOT, standin_factory)

PROMPTS = os.path.join(ROOT, "playbooks", "files", "bench-prompts.jsonl")
LEVELS = [1, 4]


def _paths(golden):
    return os.path.join(golden, "target"), os.path.join(golden, "drafter")


def _bench(capsys, url, label):
    res = run_module(sglang_bench.main, capsys, {"url": url, "prompts": PROMPTS, "concurrency": LEVELS,
                                                 "num_requests": 8, "max_new_tokens": 32, "label": label})
    assert res["_rc"] == 0, res.get("msg")
    # As registered by a play: the runner's exit code and the structured warnings are not part of it
    for key in ("_rc", "warnings", "deprecations"):
        res.pop(key, None)
    return res


@pytest.fixture
def results(capsys, standin_factory, golden):
    target, drafter = _paths(golden)
    spec = standin_factory(target, drafter=drafter, wait="ready", env={"GPUFLEET_STANDIN_STEP_MS": "5"})
    base = standin_factory(target, wait="ready", env={"GPUFLEET_STANDIN_STEP_MS": "5"})
    return _bench(capsys, spec.url, "spec"), _bench(capsys, base.url, "baseline")


@pytest.fixture
def out(tmp_path):
    """The report directory (tmp_path also holds the stand-ins' directories)."""
    path = tmp_path / "reports"
    path.mkdir()
    return path


def _report(capsys, args, check_mode=False):
    return run_module(sglang_bench_report.main, capsys, args, check_mode=check_mode)


def _png_size(path):
    from matplotlib import image  # pylint: disable=import-outside-toplevel

    pixels = image.imread(path)
    return pixels.shape[1], pixels.shape[0]


def test_report_with_baseline(capsys, out, results):
    spec, baseline = results
    res = _report(capsys, {"dest": str(out), "host": "gpu1", "spec": spec, "baseline": baseline,
                           "timestamp": "20260102T030405Z"})
    assert res["_rc"] == 0, res.get("msg")
    assert res["changed"] is True and res["standin"] is True
    files = res["files"]
    assert files["json"] == str(out / "benchmark-gpu1-20260102T030405Z.json")
    for key in ("json", "markdown", "throughput_png", "accept_length_png"):
        assert os.path.isfile(files[key]), key

    with open(files["json"]) as handle:
        doc = json.load(handle)
    assert report.schema_problems(doc) == []
    assert doc["schema_version"] == 2 and doc["host"] == "gpu1" and doc["standin"] is True
    assert doc["baseline"] == {"ran": True, "note": None}
    assert any("say nothing about real GPU performance" in n for n in doc["notes"])
    # each arm's admission from its /server_info (issue 24 item 4): these two stand-ins were started as SGLang
    # 0.5.23 would be without the playbook's pin, so the baseline admits more at once and the report says so
    assert doc["admission"] == {"spec": {"max_running_requests": 48, "effective_max_running_requests_per_dp": 48},
                                "baseline": {"max_running_requests": None,
                                             "effective_max_running_requests_per_dp": 2048},
                                "equal": False}
    assert any(n.startswith("The arms admitted a different number of requests at once") for n in doc["notes"])
    assert [s["concurrency"] for s in doc["speedup"]] == LEVELS
    assert all(s["speedup"] > 1.0 for s in doc["speedup"])
    assert doc["files"]["throughput_png"] == os.path.basename(files["throughput_png"])
    assert len(doc["runs"]["spec"]["records"]) == 16 * 3  # 3 repeats, the default
    # three repeats per arm: a Welch t interval on the log throughputs around the pooled ratio
    for item in doc["speedup"]:
        assert item["ci_method"] == "welch-t-log-ratio" and (item["repeats_spec"], item["repeats_baseline"]) == (3, 3)
        assert item["speedup_ci_low"] <= item["speedup_ci_high"]

    with open(files["markdown"]) as handle:
        text = handle.read()
    assert "Stand-in" in text and "say nothing about real GPU performance" in text
    rows = report.table_rows(text)
    assert [(r[0], r[1]) for r in rows] == [("spec", "1"), ("spec", "4"), ("baseline", "1"), ("baseline", "4")]
    for row in rows:
        assert len(row) == 9 and float(row[3]) > 0  # output tok/s
    assert [row[6] != "-" for row in rows] == [True, True, False, False]  # no accept length without spec decoding
    assert re.match(r"^\d+\.\d\dx \[\d+\.\d\d-\d+\.\d\d\]$", rows[0][8]) and rows[2][8] == "-"
    assert float(rows[1][8].split("x")[0]) == pytest.approx(doc["speedup"][1]["speedup"], abs=0.006)
    assert "temperature 1.0" in text and "3 repeat(s)" in text and "speedup [95% CI]" in text
    assert "![output throughput vs concurrency](benchmark-gpu1-20260102T030405Z-throughput.png)" in text

    for key in ("throughput_png", "accept_length_png"):
        assert _png_size(files[key]) == (plots.PLOT_WIDTH, plots.PLOT_HEIGHT)


def test_report_of_arms_with_equal_admission(capsys, out, standin_factory, golden):
    # the benchmark playbook pins the baseline's max-running-requests to the speculative arm's resolved value
    target, drafter = _paths(golden)
    spec = standin_factory(target, drafter=drafter, wait="ready", env={"GPUFLEET_STANDIN_STEP_MS": "5"})
    base = standin_factory(target, wait="ready", options={"max-running-requests": 48},
                           env={"GPUFLEET_STANDIN_STEP_MS": "5"})
    res = _report(capsys, {"dest": str(out), "host": "gpu1", "plots": False,
                           "spec": _bench(capsys, spec.url, "spec"), "baseline": _bench(capsys, base.url, "baseline")})
    assert res["_rc"] == 0, res.get("msg")
    with open(res["files"]["json"]) as handle:
        doc = json.load(handle)
    assert report.schema_problems(doc) == []
    both = {"max_running_requests": 48, "effective_max_running_requests_per_dp": 48}
    assert doc["admission"] == {"spec": both, "baseline": both, "equal": True}
    assert not any("admitted a different number" in n for n in doc["notes"])
    assert ("- admission (/server_info max_running_requests, effective per DP rank): spec 48 (48), baseline 48 (48); "
            "equal") in res["markdown"]


def test_unequal_admission_names_the_levels_it_skews(results):
    spec, baseline = results
    wide = dict(spec, levels=spec["levels"] + [dict(spec["levels"][-1], concurrency=64)])
    doc = report.build("gpu1", wide, baseline)
    assert doc["admission"]["equal"] is False
    note = [n for n in doc["notes"] if "admitted a different number" in n][0]
    assert "spec 48, effective per DP rank 48; baseline unset, effective per DP rank 2048" in note
    assert "levels 64 compare unequal admission" in note and "Pin max-running-requests" in note
    assert "spec 48 (48), baseline unset (2048); NOT equal" in report.markdown(doc)


def test_report_without_baseline(capsys, out, results):
    spec = results[0]
    res = _report(capsys, {"dest": str(out), "host": "gpu/2 odd", "spec": spec,
                           "baseline_note": "set sglang_bench_baseline=true to run it"})
    assert res["_rc"] == 0, res.get("msg")
    assert os.path.basename(res["files"]["json"]).startswith("benchmark-gpu_2_odd-")
    with open(res["files"]["json"]) as handle:
        doc = json.load(handle)
    assert report.schema_problems(doc) == []
    assert doc["speedup"] == [] and doc["runs"]["baseline"] is None
    assert doc["baseline"] == {"ran": False, "note": "set sglang_bench_baseline=true to run it"}
    assert "not run: set sglang_bench_baseline=true" in res["markdown"]
    assert [r[0] for r in report.table_rows(res["markdown"])] == ["spec", "spec"]
    assert _png_size(res["files"]["throughput_png"]) == (plots.PLOT_WIDTH, plots.PLOT_HEIGHT)


def test_check_mode_writes_nothing(capsys, out, results):
    spec, baseline = results
    res = _report(capsys, {"dest": str(out), "host": "gpu1", "spec": spec, "baseline": baseline},
                  check_mode=True)
    assert res["_rc"] == 0, res.get("msg")
    assert os.listdir(str(out)) == [] and "| spec | 1 |" in res["markdown"]


def test_plots_off(capsys, out, results):
    spec = results[0]
    res = _report(capsys, {"dest": str(out), "host": "gpu1", "spec": spec, "plots": False})
    assert res["_rc"] == 0, res.get("msg")
    assert res["files"]["throughput_png"] is None
    assert sorted(p.rsplit(".", 1)[1] for p in os.listdir(str(out))) == ["json", "md"]


def test_missing_matplotlib(capsys, out, monkeypatch, results):
    spec = results[0]
    monkeypatch.setattr(sglang_bench_report, "MATPLOTLIB_ERROR", "Traceback: No module named 'matplotlib'")
    res = _report(capsys, {"dest": str(out), "host": "gpu1", "spec": spec})
    assert res["_rc"] == 1
    assert "Failed to import the required Python library (matplotlib)" in res["msg"] and "plots=false" in res["msg"]


def test_bad_inputs(capsys, out, results):
    spec = results[0]
    res = _report(capsys, {"dest": str(out / "missing"), "host": "gpu1", "spec": spec})
    assert res["_rc"] == 1 and "is not a directory" in res["msg"]
    res = _report(capsys, {"dest": str(out), "host": "gpu1", "spec": {"failed": True, "msg": "3 of 8 failed"}})
    assert res["_rc"] == 1 and "failed sglang_bench result (3 of 8 failed)" in res["msg"]
    res = _report(capsys, {"dest": str(out), "host": "gpu1", "spec": {"changed": False, "workload": {}}})
    assert res["_rc"] == 1 and "has no levels" in res["msg"] and "check mode" in res["msg"]
    broken = dict(spec, levels=[dict(spec["levels"][0], concurrency=0)])
    res = _report(capsys, {"dest": str(out), "host": "gpu1", "spec": broken})
    assert res["_rc"] == 1 and "spec.levels[0].concurrency: 0 is below the minimum 1" in res["msg"]
    assert os.listdir(str(out)) == []


def test_schema_check_names_problems():
    problems = report.schema_problems({"schema_version": 1, "standin": "yes"})
    assert "$.schema_version: 1 is not one of [2]" in problems
    assert "$: missing key 'generated_at'" in problems
    assert "$.standin: expected boolean, got str" in problems


def test_report_paths_and_run_in_check_mode(out, results):
    paths = report.report_paths(str(out), "gpu1", "T", plots=False)
    assert paths == dict(json=str(out / "benchmark-gpu1-T.json"), markdown=str(out / "benchmark-gpu1-T.md"),
                         throughput_png=None, accept_length_png=None)
    assert report.report_paths(str(out), "gpu1", "T", plots=True) == report.file_names(str(out), "gpu1", "T")
    params = dict((name, spec.get("default")) for name, spec in report.argument_spec().items())
    params.update(dest=str(out), host="gpu1", spec=results[0], timestamp="T", plots=False)
    res = report.run(params, check_mode=True)
    assert res["files"] == paths and res["changed"] is True and os.listdir(str(out)) == []
    with pytest.raises(ModuleFailure, match="is not a directory"):
        report.run(dict(params, dest=str(out / "missing")), check_mode=False)
