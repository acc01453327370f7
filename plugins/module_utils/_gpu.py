# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_info's logic: nvidia-smi facts, model sizes on disk, and the per-GPU memory fit.

Private to the collection: not a public API, may change without notice.

The memory model (per GPU, bytes):

    needed    = target weights / tp_size + drafter weights + total x headroom_fraction
    available = total x mem_fraction_static

SGLang's ``mem-fraction-static`` is the share of each GPU's memory it takes for its static pool:
weights plus the KV cache. The rest is left for activations and CUDA graphs. Tensor parallelism
shards the target's weights over ``tp_size`` GPUs; the drafter is counted whole on every GPU (it is
small, a DFlash drafter is about 6.5 GB for a 589 GB target, and counting it whole keeps the check
on the safe side whether or not a release shards it). ``headroom_fraction`` is the KV cache the
server must be left with: a pool that is only just big enough for the weights starts and then
serves almost nothing.

The fit uses each GPU's *total* memory, not its free memory: on a host that serves, the running
server holds most of it, and the restart this check gates frees it first.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
from typing import Any, Callable

from ansible_collections.gpufleet.llm.plugins.module_utils._common import jsonfile as _jsonfile
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
# From _paths, which needs only the standard library: importing _safetensors would load numpy and
# safetensors, which gpu_info never uses.
from ansible_collections.gpufleet.llm.plugins.module_utils._common.paths import INDEX

QUERY_FIELDS = ("index", "name", "memory.total", "memory.used", "compute_cap", "driver_version", "uuid")
QUERY_ARGS = ["--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits"]
MIB = 1024 * 1024
GIB = 1024 ** 3
# nvidia-smi's exit code when the driver is loaded and there is no GPU ("No devices were found").
NO_DEVICES_RC = 6
# What nvidia-smi prints for a value a GPU or driver does not report.
NOT_AVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "")


class GpuError(Exception):
    """nvidia-smi cannot be run or its output cannot be read; the message says why and what to do."""


class ModelSizeError(ValueError):
    """A model directory has no weights whose size can be read."""


def find_nvidia_smi(path=None):
    """The nvidia-smi to run: ``path`` as given (must be executable), else the one on PATH, else None."""
    if path:
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which("nvidia-smi")


def run_nvidia_smi(exe, timeout=60):
    """(rc, stdout, stderr) of the query. A hung driver makes nvidia-smi block: hence the timeout."""
    try:
        proc = subprocess.run([exe] + QUERY_ARGS, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise GpuError("%s did not answer within %d s (a hung driver or GPU); check `nvidia-smi` on the host"
                       % (exe, timeout))
    except OSError as exc:
        raise GpuError("cannot run %s: %s" % (exe, exc))
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def _int_or_none(value):
    value = value.strip()
    if value in NOT_AVAILABLE:
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


def _str_or_none(value):
    value = value.strip()
    return None if value in NOT_AVAILABLE else value


def parse_query(text):
    """GPUs from ``--query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits`` output.

    Memory figures are MiB (nounits). Values a GPU does not report are None. A line with the wrong
    number of fields raises GpuError naming it: a driver that prints something else must not be
    read as "no GPUs".
    """
    gpus = []
    for lineno, row in enumerate(csv.reader(text.splitlines(), skipinitialspace=True), 1):
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(QUERY_FIELDS):
            raise GpuError("nvidia-smi output line %d has %d fields, expected %d (%s): %r"
                           % (lineno, len(row), len(QUERY_FIELDS), ",".join(QUERY_FIELDS), ",".join(row)[:200]))
        raw = dict(zip(QUERY_FIELDS, row))
        index = _int_or_none(raw["index"])
        if index is None:
            raise GpuError("nvidia-smi output line %d has no GPU index: %r" % (lineno, ",".join(row)[:200]))
        total = _int_or_none(raw["memory.total"])
        used = _int_or_none(raw["memory.used"])
        cap = _str_or_none(raw["compute_cap"])
        gpus.append({
            "index": index,
            "name": _str_or_none(raw["name"]),
            "uuid": _str_or_none(raw["uuid"]),
            "memory_total_mib": total,
            "memory_used_mib": used,
            "memory_free_mib": total - used if total is not None and used is not None else None,
            "compute_cap": cap,
            # sm_XY as CUDA and build flags spell it (10.3 -> sm_103).
            "sm": "sm_" + cap.replace(".", "") if cap else None,
            "driver_version": _str_or_none(raw["driver_version"]),
        })
    gpus.sort(key=lambda g: g["index"])
    return gpus


def query(nvidia_smi=None, require_gpu=True):
    """(gpus, nvidia_smi path or None, notices). Raises GpuError when GPUs are required and unreadable."""
    exe = find_nvidia_smi(nvidia_smi)
    if exe is None:
        where = ("%s is not an executable file" % nvidia_smi) if nvidia_smi else "nvidia-smi is not on PATH"
        if require_gpu:
            raise GpuError("%s: install the NVIDIA driver (it ships nvidia-smi) or set nvidia_smi to its path; "
                           "set require_gpu=false to report gpus=0 on a host without GPUs" % where)
        return [], None, [where + ": reporting no GPUs (require_gpu=false)"]
    rc, out, err = run_nvidia_smi(exe)
    if rc == NO_DEVICES_RC or (rc == 0 and not out.strip()):
        if require_gpu:
            raise GpuError("%s found no GPU (exit %d: %s); check the driver and that the devices are visible "
                           "(set require_gpu=false to accept a host without GPUs)"
                           % (exe, rc, (err or out).strip()[:300] or "no output"))
        return [], exe, ["%s found no GPU: reporting no GPUs (require_gpu=false)" % exe]
    if rc != 0:
        # e.g. exit 9: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver".
        raise GpuError("%s failed (exit %d): %s" % (exe, rc, (err or out).strip()[:500] or "no output"))
    return parse_query(out), exe, []


# An index's total_size above this is nonsense (2**50 B = 1 PiB of weights), not a size to reason with.
_MAX_SANE_TOTAL = 1 << 50


def model_size(path):
    """(bytes, source) of one model directory's weights.

    The larger of the index's ``metadata.total_size`` (the tensor bytes a loader places) and the
    sizes of the ``*.safetensors`` files on disk (headers included: a few KB more). model_verify
    ties the index's weight_map to the shards but treats total_size as advisory (converters
    disagree about it), so a total_size that is too small must not make a model "fit".
    ``os.stat`` sizes are apparent sizes, so a sparse test tree counts at its full size.
    """
    if not os.path.isdir(path):
        raise ModelSizeError("%s: not a directory; pass the model directory (the commit directory the model "
                             "role fetched into)" % path)
    index_total = None
    index = os.path.join(path, INDEX)
    if os.path.isfile(index):
        try:
            data = _jsonfile.read_json_file(index)
            total = data.get("metadata", {}).get("total_size")
        except (_jsonfile.JsonFileError, AttributeError) as exc:
            raise ModelSizeError("%s: %s does not parse (%s); run model_verify on it" % (path, INDEX, exc))
        if isinstance(total, int) and not isinstance(total, bool) and 0 < total <= _MAX_SANE_TOTAL:
            index_total = total
    on_disk = 0
    found = 0
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if name.endswith(".safetensors") and os.path.isfile(full):
            on_disk += os.stat(full).st_size
            found += 1
    if index_total is not None and index_total >= on_disk:
        return index_total, "index total_size"
    if not found:
        raise ModelSizeError("%s: no *.safetensors files and no %s with metadata.total_size; is this the model "
                             "directory?" % (path, INDEX))
    return on_disk, "%d safetensors file(s) on disk" % found


def _gib(nbytes):
    return "%.1f GiB" % (nbytes / float(GIB))


def fit(gpus: list[dict], model_bytes: int, drafter_bytes: int = 0, *, tp_size: int, nnodes: int,
        mem_fraction_static: float, headroom_fraction: float) -> dict[str, Any]:
    """The memory-fit verdict for this host: a dict with ``fits``, the numbers and ``problems``.

    With tp_size over nnodes hosts, each host runs tp_size / nnodes ranks, one per GPU, on the
    GPUs with the lowest indexes (SGLang's default ``base-gpu-id`` 0). Every one of those GPUs must
    hold its share.
    """
    problems = []
    gpus_per_node = tp_size // nnodes if nnodes and tp_size % nnodes == 0 else None
    shard = -(-model_bytes // tp_size)  # ceil: the largest share a rank gets
    result = {
        "fits": False,
        "tp_size": tp_size,
        "nnodes": nnodes,
        "gpus_needed": gpus_per_node,
        "gpus_present": len(gpus),
        "model_bytes": model_bytes,
        "drafter_bytes": drafter_bytes,
        "mem_fraction_static": mem_fraction_static,
        "headroom_fraction": headroom_fraction,
        "weights_per_gpu_bytes": shard,
        "per_gpu": [],
        "problems": problems,
    }
    if gpus_per_node is None:
        problems.append("tp_size %d is not a multiple of nnodes %d: every node runs tp_size / nnodes ranks"
                        % (tp_size, nnodes))
        return result
    if len(gpus) < gpus_per_node:
        problems.append("tp_size %d over %d node(s) needs %d GPU(s) on this host, it has %d; lower tp_size or "
                        "add nodes (nnodes)" % (tp_size, nnodes, gpus_per_node, len(gpus)))
    for gpu in gpus[:gpus_per_node]:
        total_mib = gpu["memory_total_mib"]
        if total_mib is None:
            problems.append("GPU %d (%s): nvidia-smi reports no memory.total; cannot check the fit"
                            % (gpu["index"], gpu["name"]))
            continue
        total = total_mib * MIB
        headroom = int(total * headroom_fraction)
        needed = shard + drafter_bytes + headroom
        available = int(total * mem_fraction_static)
        entry = {"index": gpu["index"], "name": gpu["name"], "total_bytes": total, "available_bytes": available,
                 "needed_bytes": needed, "headroom_bytes": headroom, "fits": needed <= available}
        result["per_gpu"].append(entry)
        if not entry["fits"]:
            problems.append(
                "GPU %d (%s): needs %s per GPU (weights %s / tp %d = %s + drafter %s + KV headroom %s (%.2f x %s)), "
                "available %s (%s x mem_fraction_static %.2f); short by %s"
                % (gpu["index"], gpu["name"], _gib(needed), _gib(model_bytes), tp_size, _gib(shard),
                   _gib(drafter_bytes), _gib(headroom), headroom_fraction, _gib(total), _gib(available),
                   _gib(total), mem_fraction_static, _gib(needed - available)))
    if result["per_gpu"]:
        result["needed_per_gpu_bytes"] = max(e["needed_bytes"] for e in result["per_gpu"])
        result["available_per_gpu_bytes"] = min(e["available_bytes"] for e in result["per_gpu"])
    result["fits"] = not problems
    return result


def check_fractions(mem_fraction_static: float, headroom_fraction: float) -> list[str]:
    """Parameter problems (list of str) for the two fractions."""
    problems = []
    if not 0 < mem_fraction_static <= 1:
        problems.append("mem_fraction_static must be in (0, 1], got %r (SGLang's --mem-fraction-static)"
                        % mem_fraction_static)
    if not 0 <= headroom_fraction < 1:
        problems.append("headroom_fraction must be in [0, 1), got %r" % headroom_fraction)
    return problems


def failure_message(verdict):
    head = "the model does not fit this host's GPUs"
    if verdict.get("needed_per_gpu_bytes") is not None:
        head += " (needed %s per GPU, available %s per GPU)" % (
            _gib(verdict["needed_per_gpu_bytes"]), _gib(verdict["available_per_gpu_bytes"]))
    return head + ": " + "; ".join(verdict["problems"])


# --- the module: its options, their checks, and the result it returns --------------------------------

def argument_spec() -> dict[str, dict[str, Any]]:
    """gpu_info's options, the one place their types and defaults are written."""
    return dict(
        nvidia_smi=dict(type="path"),
        require_gpu=dict(type="bool", default=True),
        model_paths=dict(type="list", elements="path"),
        drafter_paths=dict(type="list", elements="path"),
        tp_size=dict(type="int", default=1),
        nnodes=dict(type="int", default=1),
        mem_fraction_static=dict(type="float", default=0.9),
        headroom_fraction=dict(type="float", default=0.1),
        fail_on_problem=dict(type="bool", default=True),
    )


def check_params(params: dict[str, Any]) -> list[str]:
    """Problems with the options as given (empty when fine), before anything runs."""
    problems = check_fractions(params["mem_fraction_static"], params["headroom_fraction"])
    if params["tp_size"] < 1 or params["nnodes"] < 1:
        problems.append("tp_size and nnodes must be at least 1, got tp_size=%d nnodes=%d"
                        % (params["tp_size"], params["nnodes"]))
    if params["drafter_paths"] and not params["model_paths"]:
        problems.append("drafter_paths needs model_paths (the target the drafter serves)")
    return problems


def facts(gpus: list[dict], nvidia_smi: str | None) -> dict[str, Any]:
    """The host's GPU facts as gpu_info returns them; the summary keys are null without GPUs."""
    return dict(
        changed=False,
        gpus=gpus,
        gpu_count=len(gpus),
        names=sorted(set(g["name"] for g in gpus if g["name"])),
        compute_caps=sorted(set(g["compute_cap"] for g in gpus if g["compute_cap"])),
        driver_version=gpus[0]["driver_version"] if gpus else None,
        memory_total_mib=min((g["memory_total_mib"] for g in gpus if g["memory_total_mib"] is not None), default=None),
        nvidia_smi=nvidia_smi,
    )


def model_sizes(model_paths: list[str], drafter_paths: list[str] | None) -> list[dict[str, Any]]:
    """One entry per directory: its path, role (model or drafter), weight bytes and their source."""
    models = []
    for role, paths in (("model", model_paths), ("drafter", drafter_paths or [])):
        for path in paths:
            size, source = model_size(path)
            models.append(dict(path=path, role=role, bytes=size, source=source))
    return models


def run(params: dict[str, Any], *, warn: Callable[[str], None]) -> dict[str, Any]:
    """gpu_info from its options: the facts, and with model_paths the models and the fit verdict.

    ``warn`` receives each notice as it comes (a missing nvidia-smi with require_gpu=false), so a
    later failure still shows it. Raises ModuleFailure with the facts gathered so far.
    """
    problems = check_params(params)
    if problems:
        raise ModuleFailure("; ".join(problems))
    try:
        gpus, exe, notices = query(params["nvidia_smi"], require_gpu=params["require_gpu"])
    except GpuError as exc:
        raise ModuleFailure(str(exc), gpus=[], gpu_count=0)
    for notice in notices:
        warn(notice)
    result = facts(gpus, exe)
    if not params["model_paths"]:
        return result
    try:
        models = model_sizes(params["model_paths"], params["drafter_paths"])
    except ModelSizeError as exc:
        raise ModuleFailure(str(exc), **result)
    result["models"] = models
    verdict = fit(
        gpus,
        model_bytes=sum(m["bytes"] for m in models if m["role"] == "model"),
        drafter_bytes=sum(m["bytes"] for m in models if m["role"] == "drafter"),
        tp_size=params["tp_size"], nnodes=params["nnodes"],
        mem_fraction_static=params["mem_fraction_static"], headroom_fraction=params["headroom_fraction"])
    result["fit"] = verdict
    if not verdict["fits"] and params["fail_on_problem"]:
        raise ModuleFailure(failure_message(verdict), **result)
    return result
