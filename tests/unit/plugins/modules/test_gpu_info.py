# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gpu_info module end to end, in-process. No GPU here: nvidia-smi is a stand-in script that
prints canned output in nvidia-smi's format (see gpu_fixtures.py), run for real as a subprocess,
found by path or on PATH like the real one."""
from __future__ import annotations

import json

import pytest

from ansible_collections.gpufleet.llm.plugins.modules import gpu_info
from ansible_collections.gpufleet.llm.tests.unit.plugins.modules.module_runner import run_module
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import gpu_fixtures as gf


def run(capsys, args, check_mode=False):
    return run_module(gpu_info.main, capsys, args, check_mode=check_mode)


@pytest.fixture
def models(tmp_path):
    target = gf.make_model(str(tmp_path / "Kimi-K2.6"), total_size=gf.KIMI_BYTES)
    drafter = gf.make_model(str(tmp_path / "Kimi-K2.6-DFlash"), shard_sizes=[gf.DFLASH_BYTES])
    return target, drafter


def test_facts_b300_on_path(capsys, tmp_path, monkeypatch):
    bindir = str(tmp_path / "bin")
    gf.write_fake(bindir, gf.B300_X8)
    monkeypatch.setenv("PATH", bindir + ":/usr/bin:/bin")
    for check_mode in (False, True):
        res = run(capsys, {}, check_mode=check_mode)
        assert res["_rc"] == 0 and res["changed"] is False
        assert res["gpu_count"] == 8
        assert res["names"] == ["NVIDIA B300 SXM6 AC"]
        assert res["compute_caps"] == ["10.3"] and res["gpus"][3]["sm"] == "sm_103"
        assert res["driver_version"] == "580.95.05"
        assert res["memory_total_mib"] == 275040
        assert res["nvidia_smi"] == bindir + "/nvidia-smi"
        assert "fit" not in res


def test_small_host(capsys, tmp_path):
    fake = gf.write_fake(str(tmp_path / "bin"), gf.SMALL_X2)
    res = run(capsys, {"nvidia_smi": fake})
    assert res["gpu_count"] == 2 and res["compute_caps"] == ["8.9"]
    assert res["gpus"][1]["memory_free_mib"] == 23034 - 20480


def test_kimi_fits_b300_and_h200(capsys, tmp_path, models):
    target, drafter = models
    for name, text in (("b300", gf.B300_X8), ("h200", gf.H200_X8)):
        fake = gf.write_fake(str(tmp_path / name), text)
        res = run(capsys, {"nvidia_smi": fake, "model_paths": [target], "drafter_paths": [drafter], "tp_size": 8},
                  check_mode=True)
        assert res["_rc"] == 0, res.get("msg")
        assert res["fit"]["fits"] and res["fit"]["gpus_needed"] == 8
        assert [m["bytes"] for m in res["models"]] == [gf.KIMI_BYTES, gf.DFLASH_BYTES]
        assert res["models"][0]["source"] == "index total_size"


def test_kimi_two_h100_nodes_tp16(capsys, tmp_path, models):
    fake = gf.write_fake(str(tmp_path / "bin"), gf.H100_X8)
    res = run(capsys, {"nvidia_smi": fake, "model_paths": [models[0]], "drafter_paths": [models[1]],
                       "tp_size": 16, "nnodes": 2})
    assert res["_rc"] == 0 and res["fit"]["fits"]


@pytest.mark.parametrize("text,extra,fragment", [
    (gf.H100_X8, {"tp_size": 8}, "GPU 0 (NVIDIA H100 80GB HBM3): needs 82.6 GiB per GPU"),
    (gf.H200_X8, {"tp_size": 4}, "available 126.4 GiB"),
    (gf.H200_X8, {"tp_size": 8, "mem_fraction_static": 0.5}, "mem_fraction_static 0.50"),
    (gf.H200_X1, {"tp_size": 8}, "needs 8 GPU(s) on this host, it has 1"),
])
def test_kimi_does_not_fit(capsys, tmp_path, models, text, extra, fragment):
    fake = gf.write_fake(str(tmp_path / "bin"), text)
    args = dict({"nvidia_smi": fake, "model_paths": [models[0]], "drafter_paths": [models[1]]}, **extra)
    res = run(capsys, args)
    assert res["_rc"] == 1 and res["failed"]
    assert fragment in res["msg"], res["msg"]
    assert res["fit"]["fits"] is False
    # Report-only mode returns the same verdict without failing.
    res = run(capsys, dict(args, fail_on_problem=False))
    assert res["_rc"] == 0 and res["fit"]["fits"] is False and res["fit"]["problems"]


def test_missing_nvidia_smi(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    res = run(capsys, {})
    assert res["_rc"] == 1 and "nvidia-smi is not on PATH" in res["msg"] and "require_gpu=false" in res["msg"]
    res = run(capsys, {"require_gpu": False})
    assert res["_rc"] == 0 and res["gpu_count"] == 0 and res["gpus"] == [] and res["nvidia_smi"] is None
    assert "reporting no GPUs" in json.dumps(res["warnings"])  # 2.19: structured warnings
    res = run(capsys, {"nvidia_smi": str(tmp_path / "nvidia-smi")})
    assert res["_rc"] == 1 and "is not an executable file" in res["msg"]


def test_driver_failure(capsys, tmp_path):
    fake = gf.write_fake(str(tmp_path / "bin"), stderr=gf.NO_DRIVER, rc=9)
    res = run(capsys, {"nvidia_smi": fake, "require_gpu": False})
    assert res["_rc"] == 1 and "exit 9" in res["msg"] and "NVIDIA driver" in res["msg"]


def test_no_gpu_but_model_fails(capsys, tmp_path, models):
    fake = gf.write_fake(str(tmp_path / "bin"), "No devices were found\n", rc=6)
    res = run(capsys, {"nvidia_smi": fake, "require_gpu": False, "model_paths": [models[0]]})
    assert res["_rc"] == 1 and "needs 1 GPU(s) on this host, it has 0" in res["msg"]


@pytest.mark.parametrize("args,fragment", [
    ({"mem_fraction_static": 1.2}, "mem_fraction_static must be in (0, 1]"),
    ({"headroom_fraction": 1.0}, "headroom_fraction must be in [0, 1)"),
    ({"tp_size": 0}, "tp_size and nnodes must be at least 1"),
    ({"drafter_paths": ["/x"]}, "drafter_paths needs model_paths"),
    ({"model_paths": ["/nonexistent/model"]}, "/nonexistent/model: not a directory"),
])
def test_bad_parameters(capsys, tmp_path, args, fragment):
    fake = gf.write_fake(str(tmp_path / "bin"), gf.H200_X8)
    res = run(capsys, dict(args, nvidia_smi=fake))
    assert res["_rc"] == 1 and fragment in res["msg"], res["msg"]
