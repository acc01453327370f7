# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_gpu: nvidia-smi parsing, model sizes and the memory fit.

No GPU here: nvidia-smi is a stand-in script printing canned output in nvidia-smi's format
(gpu_fixtures.py says where the figures come from). The fit cases are the issue's: Kimi K2.6
(589 GB) + DFlash drafter (6.5 GB).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils import _gpu
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import safetensors as _safetensors
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import gpu_fixtures as gf


def test_parse_b300():
    gpus = _gpu.parse_query(gf.B300_X8)
    assert len(gpus) == 8
    first = gpus[0]
    assert first["index"] == 0
    assert first["name"] == "NVIDIA B300 SXM6 AC"
    assert first["memory_total_mib"] == 275040
    assert first["memory_free_mib"] == 275040
    assert first["compute_cap"] == "10.3" and first["sm"] == "sm_103"
    assert first["driver_version"] == "580.95.05"
    assert first["uuid"].startswith("GPU-b300-")
    assert [g["index"] for g in gpus] == list(range(8))


def test_parse_not_available_fields_and_order():
    text = "".join(reversed(gf.SMALL_X2.splitlines(True)))  # nvidia-smi order is not relied on
    gpus = _gpu.parse_query(text + "\n\n")
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[1]["compute_cap"] is None and gpus[1]["sm"] is None
    assert gpus[1]["memory_free_mib"] == 23034 - 20480


@pytest.mark.parametrize("text", ["0, NVIDIA H200, 143771\n", "no devices here\n", "x, a, 1, 2, 3, 4, 5\n"])
def test_parse_garbage_is_an_error_not_zero_gpus(text):
    with pytest.raises(_gpu.GpuError) as exc:
        _gpu.parse_query(text)
    assert "line 1" in str(exc.value)


def test_query_with_fake_and_missing(tmp_path):
    fake = gf.write_fake(str(tmp_path / "bin"), gf.H200_X8)
    gpus, exe, notices = _gpu.query(fake)
    assert exe == fake and len(gpus) == 8 and not notices
    missing = str(tmp_path / "nope" / "nvidia-smi")
    with pytest.raises(_gpu.GpuError) as exc:
        _gpu.query(missing)
    assert missing in str(exc.value) and "require_gpu=false" in str(exc.value)
    assert _gpu.query(missing, require_gpu=False)[:2] == ([], None)


def test_query_driver_failure_and_no_devices(tmp_path):
    broken = gf.write_fake(str(tmp_path / "a"), gf.NO_DRIVER, rc=9)
    with pytest.raises(_gpu.GpuError) as exc:
        _gpu.query(broken)
    assert "exit 9" in str(exc.value) and "couldn't communicate" in str(exc.value)
    none = gf.write_fake(str(tmp_path / "b"), "No devices were found\n", rc=6)
    with pytest.raises(_gpu.GpuError):
        _gpu.query(none)
    gpus, exe, notices = _gpu.query(none, require_gpu=False)
    assert gpus == [] and exe == none and "no GPU" in notices[0]


def test_model_size_never_below_the_shards_on_disk(tmp_path):
    """model_verify treats total_size as advisory, so an index that says a tenth of the real bytes
    (or 10**400) must not make a model fit: the shards on disk are the floor."""
    small = gf.make_model(str(tmp_path / "small"), total_size=gf.DFLASH_BYTES // 10, shard_sizes=[gf.DFLASH_BYTES])
    assert _gpu.model_size(small) == (gf.DFLASH_BYTES, "1 safetensors file(s) on disk")
    huge = gf.make_model(str(tmp_path / "huge"), shard_sizes=[10])
    with open(os.path.join(huge, _gpu.INDEX), "w") as handle:
        handle.write('{"metadata": {"total_size": 1%s}, "weight_map": {}}' % ("0" * 400))
    assert _gpu.model_size(huge) == (10, "1 safetensors file(s) on disk")


def test_model_size_index_and_shards(tmp_path):
    assert _gpu.model_size(gf.make_model(str(tmp_path / "t"), total_size=gf.KIMI_BYTES)) == (
        gf.KIMI_BYTES, "index total_size")
    size, source = _gpu.model_size(gf.make_model(str(tmp_path / "d"), shard_sizes=[gf.DFLASH_BYTES - 10, 10]))
    assert size == gf.DFLASH_BYTES and "2 safetensors" in source
    with pytest.raises(_gpu.ModelSizeError) as exc:
        _gpu.model_size(str(tmp_path / "empty-does-not-exist"))
    assert "not a directory" in str(exc.value)
    (tmp_path / "e").mkdir()
    with pytest.raises(_gpu.ModelSizeError):
        _gpu.model_size(str(tmp_path / "e"))


def kimi_fit(text, tp, nnodes=1, mfs=0.9, headroom=0.1):
    return _gpu.fit(_gpu.parse_query(text), gf.KIMI_BYTES, gf.DFLASH_BYTES, tp_size=tp, nnodes=nnodes,
                    mem_fraction_static=mfs, headroom_fraction=headroom)


@pytest.mark.parametrize("text,tp,nnodes,mfs", [
    (gf.H200_X8, 8, 1, 0.9),
    (gf.B300_X8, 8, 1, 0.9),
    (gf.H100_X8, 16, 2, 0.9),   # two 8x H100 nodes at tp 16: this host holds 1/16 per GPU
])
def test_kimi_fits(text, tp, nnodes, mfs):
    verdict = kimi_fit(text, tp, nnodes, mfs)
    assert verdict["fits"], verdict["problems"]
    assert verdict["problems"] == []
    assert len(verdict["per_gpu"]) == tp // nnodes
    assert verdict["needed_per_gpu_bytes"] <= verdict["available_per_gpu_bytes"]


@pytest.mark.parametrize("text,tp,mfs,fragment", [
    (gf.H200_X1, 1, 0.9, "GPU 0 (NVIDIA H200): needs"),
    (gf.H200_X1, 8, 0.9, "needs 8 GPU(s) on this host, it has 1"),
    (gf.H100_X8, 8, 0.9, "GPU 7 (NVIDIA H100 80GB HBM3): needs"),
    (gf.H200_X8, 4, 0.9, "weights 548.5 GiB / tp 4"),
    (gf.H200_X8, 8, 0.5, "mem_fraction_static 0.50"),
])
def test_kimi_does_not_fit(text, tp, mfs, fragment):
    verdict = kimi_fit(text, tp, 1, mfs)
    assert not verdict["fits"]
    message = _gpu.failure_message(verdict)
    assert fragment in message
    if any(not gpu["fits"] for gpu in verdict["per_gpu"]):
        assert "needed" in message and "available" in message and "short by" in message


def test_fit_numbers_h100():
    verdict = kimi_fit(gf.H100_X8, 8)
    gpu = verdict["per_gpu"][0]
    total = 81559 * 1024 * 1024
    assert gpu["total_bytes"] == total
    assert gpu["available_bytes"] == int(total * 0.9)
    assert gpu["needed_bytes"] == -(-gf.KIMI_BYTES // 8) + gf.DFLASH_BYTES + int(total * 0.1)
    # Busy GPUs (71 GB used by a running server) do not change the verdict: total memory counts.
    assert verdict["per_gpu"] == kimi_fit(gf.H100_X8.replace(", 71250,", ", 0,"), 8)["per_gpu"]


def test_fit_tp_not_multiple_of_nnodes_and_no_headroom():
    verdict = kimi_fit(gf.H100_X8, 12, nnodes=8)
    assert not verdict["fits"] and "not a multiple" in verdict["problems"][0]
    # The weights alone (no KV headroom) do not fit 8x H100 at 0.9 either; at 0.95 they would load and
    # leave a KV cache of about one GiB per GPU: the headroom is what makes that a failure.
    assert not kimi_fit(gf.H100_X8, 8, headroom=0.0)["fits"]
    assert kimi_fit(gf.H100_X8, 8, mfs=0.95, headroom=0.0)["fits"]
    assert not kimi_fit(gf.H100_X8, 8, mfs=0.95)["fits"]


def test_fractions():
    assert _gpu.check_fractions(0.9, 0.1) == []
    assert len(_gpu.check_fractions(0.0, 1.0)) == 2
    assert len(_gpu.check_fractions(1.5, -0.1)) == 2


# --- the module's logic: options, checks and result -----------------------------------------------

def _params(**given):
    """gpu_info's params as AnsibleModule builds them: every option, defaults from argument_spec()."""
    params = dict((name, spec.get("default")) for name, spec in _gpu.argument_spec().items())
    params.update(given)
    return params


def test_index_name_is_safetensors_own():
    assert _gpu.INDEX is _safetensors.INDEX


def test_gpu_info_logic_imports_neither_numpy_nor_safetensors():
    """gpu_info runs on hosts with only the standard library: its logic must not load the weight libraries."""
    code = ("import sys; from ansible_collections.gpufleet.llm.plugins.module_utils import _gpu; "
            "print(sorted(m for m in ('numpy', 'safetensors') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True, timeout=60)
    assert out.stdout.decode().strip() == "[]", out.stderr.decode()[-2000:]


def test_argument_spec_defaults_pass_their_own_checks():
    spec = _gpu.argument_spec()
    assert (spec["mem_fraction_static"]["default"], spec["headroom_fraction"]["default"]) == (0.9, 0.1)
    assert _gpu.check_params(_params()) == []
    assert _gpu.check_params(_params(tp_size=0, drafter_paths=["/d"], headroom_fraction=1.0)) == [
        "headroom_fraction must be in [0, 1), got 1.0",
        "tp_size and nnodes must be at least 1, got tp_size=0 nnodes=1",
        "drafter_paths needs model_paths (the target the drafter serves)"]


def test_facts_of_no_gpus_and_of_a_mixed_host():
    assert _gpu.facts([], None) == dict(changed=False, gpus=[], gpu_count=0, names=[], compute_caps=[],
                                        driver_version=None, memory_total_mib=None, nvidia_smi=None)
    gpus = _gpu.parse_query(gf.SMALL_X2)
    result = _gpu.facts(gpus, "/usr/bin/nvidia-smi")
    assert result["names"] == ["NVIDIA L4"] and result["compute_caps"] == ["8.9"]  # [N/A] is left out
    assert result["memory_total_mib"] == 23034 and result["driver_version"] == "535.230.02"


def test_run_warns_then_fails_with_the_facts(tmp_path):
    target = gf.make_model(str(tmp_path / "t"), total_size=gf.KIMI_BYTES)
    warnings = []
    with pytest.raises(ModuleFailure) as exc:
        _gpu.run(_params(nvidia_smi=str(tmp_path / "none"), require_gpu=False, model_paths=[target]),
                 warn=warnings.append)
    assert warnings == ["%s is not an executable file: reporting no GPUs (require_gpu=false)" % (tmp_path / "none")]
    fields = exc.value.fail_kwargs()
    assert "needs 1 GPU(s) on this host, it has 0" in fields["msg"]
    assert fields["gpu_count"] == 0 and fields["models"][0]["bytes"] == gf.KIMI_BYTES and not fields["fit"]["fits"]


def test_run_failures_carry_what_is_known(tmp_path):
    fake = gf.write_fake(str(tmp_path / "bin"), gf.H200_X8)
    with pytest.raises(ModuleFailure) as exc:
        _gpu.run(_params(nvidia_smi=fake, mem_fraction_static=0), warn=None)
    assert exc.value.fail_kwargs() == {"msg": "mem_fraction_static must be in (0, 1], got 0 (SGLang's "
                                              "--mem-fraction-static)"}
    broken = gf.write_fake(str(tmp_path / "broken"), stderr=gf.NO_DRIVER, rc=9)
    with pytest.raises(ModuleFailure) as exc:
        _gpu.run(_params(nvidia_smi=broken), warn=None)
    assert exc.value.fields == dict(gpus=[], gpu_count=0) and "exit 9" in exc.value.msg
    with pytest.raises(ModuleFailure) as exc:
        _gpu.run(_params(nvidia_smi=fake, model_paths=[str(tmp_path / "absent")]), warn=None)
    assert exc.value.fields["gpu_count"] == 8 and "not a directory" in exc.value.msg and "fit" not in exc.value.fields


def test_run_report_only(tmp_path):
    fake = gf.write_fake(str(tmp_path / "bin"), gf.H200_X1)
    target = gf.make_model(str(tmp_path / "t"), total_size=gf.KIMI_BYTES)
    result = _gpu.run(_params(nvidia_smi=fake, model_paths=[target], tp_size=8, fail_on_problem=False), warn=None)
    assert result["fit"]["fits"] is False and result["fit"]["problems"] and result["gpu_count"] == 1
    assert _gpu.run(_params(nvidia_smi=fake), warn=None) == _gpu.facts(_gpu.parse_query(gf.H200_X1), fake)
