# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_bench_report's logic: one benchmark report from the sglang_bench results of a host.

Private to the collection: not a public API, may change without notice.

No Ansible imports. The two PNGs are plots.py's (matplotlib, optional at import time).

Files, all named ``benchmark-<host>-<timestamp>``:
* ``.json``: the report document, ``schema_version`` 2 (``SCHEMA`` below, documented in
  docs/benchmark.md); checked against ``SCHEMA`` before it is written.
* ``.md``: a markdown table, one row per run and concurrency level, speedup per level.
* ``-throughput.png``: output throughput vs concurrency, spec vs baseline.
* ``-accept-length.png``: histogram of the per-request accept lengths of the speculative run.
"""

from __future__ import annotations

import datetime
import os
import re
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._bench import bench as _sglang_bench
from ansible_collections.gpufleet.llm.plugins.module_utils._bench.plots import write_plots
from ansible_collections.gpufleet.llm.plugins.module_utils._common import files as _files
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure

# 2: levels lost server_accept_length_window (it needed a counter SGLang does not report) and
# gained repeats; accept_length is always the requests' own; speedup gained its interval.
SCHEMA_VERSION = 2
STANDIN_WARNING = ("These figures come from the lab's SGLang stand-in, a delay model with no GPU: they say nothing "
                   "about real GPU performance.")
# Keys of a registered sglang_bench result that belong in the report (Ansible's own keys do not).
RUN_KEYS = ("label", "engine", "url", "server", "workload", "levels", "records")

_NUM = ["number", "null"]
_DIST = {"type": "object", "required": ["mean", "p50", "p90", "p99", "max"],
         "properties": dict((k, {"type": _NUM}) for k in ("mean", "p50", "p90", "p99", "max"))}
_LEVEL = {
    "type": "object",
    "required": ["concurrency", "requests", "succeeded", "failed", "wall_seconds", "output_tokens",
                 "output_throughput", "latency_s", "ttft_s", "accept_length", "server_accept_length", "source"],
    "properties": {
        "concurrency": {"type": "integer", "minimum": 1},
        "requests": {"type": "integer", "minimum": 0},
        "succeeded": {"type": "integer", "minimum": 0},
        "failed": {"type": "integer", "minimum": 0},
        "wall_seconds": {"type": _NUM},
        "output_tokens": {"type": _NUM},
        "output_throughput": {"type": _NUM},
        "latency_s": _DIST,
        "ttft_s": _DIST,
        "accept_length": {"type": _NUM},
        "server_accept_length": {"type": _NUM},
        "source": {"type": "string", "enum": ["builtin", "bench_serving"]},
    },
}
_RECORD = {
    "type": "object",
    "required": ["index", "concurrency", "ok", "ttft", "latency", "output_tokens", "accept_length"],
    "properties": {"index": {"type": "integer"}, "concurrency": {"type": "integer"}, "ok": {"type": "boolean"},
                   "ttft": {"type": _NUM}, "latency": {"type": _NUM}, "output_tokens": {"type": _NUM},
                   "accept_length": {"type": _NUM}},
}
_RUN = {
    "type": "object",
    "required": ["label", "engine", "url", "server", "workload", "levels", "records"],
    "properties": {
        "label": {"type": "string", "enum": list(_sglang_bench.LABELS)},
        "engine": {"type": "string", "enum": list(_sglang_bench.ENGINES)},
        "url": {"type": "string"},
        "server": {"type": "object", "required": ["version", "standin", "speculative_algorithm",
                                                  "avg_spec_accept_length"]},
        "workload": {"type": "object", "required": ["prompt_count", "categories", "num_requests", "max_new_tokens",
                                                    "concurrency", "temperature", "engine"]},
        "levels": {"type": "array", "minItems": 1, "items": _LEVEL},
        "records": {"type": "array", "items": _RECORD},
    },
}
_ARM_ADMISSION = {"type": "object", "required": ["max_running_requests", "effective_max_running_requests_per_dp"],
                  "properties": {"max_running_requests": {"type": ["integer", "null"]},
                                 "effective_max_running_requests_per_dp": {"type": ["integer", "null"]}}}
# A JSON Schema (draft 2020-12 subset: type, required, properties, items, enum, minimum, minItems),
# checked by ``schema_problems`` so no jsonschema library is needed.
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "gpufleet.llm SGLang benchmark report",
    "type": "object",
    "required": ["schema_version", "generated_at", "host", "standin", "runs", "speedup", "baseline", "admission",
                 "files", "notes"],
    "properties": {
        "schema_version": {"type": "integer", "enum": [SCHEMA_VERSION]},
        "generated_at": {"type": "string"},
        "host": {"type": "string"},
        "standin": {"type": "boolean"},
        "runs": {"type": "object", "required": ["spec"],
                 "properties": {"spec": _RUN, "baseline": {"type": ["object", "null"]}}},
        "speedup": {"type": "array", "items": {
            "type": "object", "required": ["concurrency", "spec_output_throughput", "baseline_output_throughput",
                                           "speedup", "latency_p50_ratio", "speedup_ci_low", "speedup_ci_high",
                                           "ci_confidence", "ci_method", "repeats_spec", "repeats_baseline"],
            "properties": {"concurrency": {"type": "integer"}, "speedup": {"type": _NUM},
                           "speedup_ci_low": {"type": _NUM}, "speedup_ci_high": {"type": _NUM}}}},
        "baseline": {"type": "object", "required": ["ran", "note"],
                     "properties": {"ran": {"type": "boolean"}, "note": {"type": ["string", "null"]}}},
        "admission": {"type": "object", "required": ["spec", "baseline", "equal"],
                      "properties": {"spec": _ARM_ADMISSION, "baseline": {"type": ["object", "null"]},
                                     "equal": {"type": ["boolean", "null"]}}},
        "files": {"type": "object", "required": ["json", "markdown", "throughput_png", "accept_length_png"]},
        "notes": {"type": "array", "items": {"type": "string"}},
    },
}


class ReportError(Exception):
    """Bad input to the report; the message names the problem and the fix."""


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value, kind):
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[kind])


def schema_problems(doc, schema=None, where="$"):
    """Every way ``doc`` breaks ``schema`` (default: the report's SCHEMA), as 'path: problem' lines."""
    schema = SCHEMA if schema is None else schema
    problems = []
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is(doc, k) for k in kinds):
            return ["%s: expected %s, got %s" % (where, " or ".join(kinds), type(doc).__name__)]
    if "enum" in schema and doc not in schema["enum"]:
        problems.append("%s: %r is not one of %r" % (where, doc, schema["enum"]))
    if "minimum" in schema and _is(doc, "number") and doc < schema["minimum"]:
        problems.append("%s: %r is below the minimum %r" % (where, doc, schema["minimum"]))
    if isinstance(doc, dict):
        for key in schema.get("required", []):
            if key not in doc:
                problems.append("%s: missing key %r" % (where, key))
        for key, sub in schema.get("properties", {}).items():
            if key in doc:
                problems.extend(schema_problems(doc[key], sub, "%s.%s" % (where, key)))
    if isinstance(doc, list):
        if len(doc) < schema.get("minItems", 0):
            problems.append("%s: needs at least %d item(s)" % (where, schema["minItems"]))
        if "items" in schema:
            for i, item in enumerate(doc):
                problems.extend(schema_problems(item, schema["items"], "%s[%d]" % (where, i)))
    return problems


def timestamp_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def safe_name(text):
    """A host name as a file-name part: anything but letters, digits, '.', '_' and '-' becomes '_'."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", text or "")
    return name.lstrip(".") or "host"


def file_names(dest, host, timestamp):
    stem = os.path.join(dest, "benchmark-%s-%s" % (safe_name(host), safe_name(timestamp)))
    return dict(json=stem + ".json", markdown=stem + ".md", throughput_png=stem + "-throughput.png",
                accept_length_png=stem + "-accept-length.png")


def report_paths(dest: str, host: str, timestamp: str, *, plots: bool) -> dict[str, str | None]:
    """file_names(), with the two PNGs None when no plots are drawn."""
    paths = file_names(dest, host, timestamp)
    if not plots:
        paths["throughput_png"] = paths["accept_length_png"] = None
    return paths


def _run(result, label):
    if not isinstance(result, dict):
        raise ReportError("%s must be the registered result of gpufleet.llm.sglang_bench (a dict), got %s"
                          % (label, type(result).__name__))
    if result.get("failed"):
        raise ReportError("%s is a failed sglang_bench result (%s); report only successful runs"
                          % (label, result.get("msg", "no message")))
    if not result.get("levels"):
        raise ReportError("%s has no levels: pass the registered result of gpufleet.llm.sglang_bench run without "
                          "check mode" % label)
    run = dict((k, result.get(k)) for k in RUN_KEYS)
    run["records"] = run["records"] or []
    problems = schema_problems(run, _RUN, label)
    if problems:
        raise ReportError("%s does not look like an sglang_bench result: %s" % (label, "; ".join(problems[:8])))
    return run


def _arm_admission(run: dict) -> dict[str, Any]:
    server = run["server"] or {}
    return dict((key, _sglang_bench.as_number(server.get(key)))
                for key in ("max_running_requests", "effective_max_running_requests_per_dp"))


def admission(spec_run: dict, base_run: dict | None) -> tuple[dict[str, Any], str | None]:
    """(the report's ``admission``, a note when the arms admitted a different number of requests at once).

    Each arm's figures are its own ``/server_info``: ``max_running_requests`` as SGLang resolved the
    option (0.5.23: 48 when unset with speculative decoding, null without) and
    ``internal_states[0].effective_max_running_requests_per_dp``, what its scheduler admits.
    """
    spec = _arm_admission(spec_run)
    base = _arm_admission(base_run) if base_run else None
    doc = dict(spec=spec, baseline=base, equal=None)
    if base is None:
        return doc, None
    known = [k for k in spec if spec[k] is not None or base[k] is not None]
    doc["equal"] = bool(known) and all(spec[k] == base[k] for k in known)
    if doc["equal"] or not known:
        return doc, None
    caps = [v for v in (spec["effective_max_running_requests_per_dp"] or spec["max_running_requests"],
                        base["effective_max_running_requests_per_dp"] or base["max_running_requests"]) if v]
    above = [lvl["concurrency"] for lvl in spec_run["levels"] if caps and lvl["concurrency"] > min(caps)]
    return doc, ("The arms admitted a different number of requests at once (/server_info max_running_requests: spec "
                 "%s, effective per DP rank %s; baseline %s, effective per DP rank %s)%s. Pin max-running-requests "
                 "in the baseline to the speculative arm's value (the benchmark playbook does)"
                 % (_unset(spec["max_running_requests"]), _unset(spec["effective_max_running_requests_per_dp"]),
                    _unset(base["max_running_requests"]), _unset(base["effective_max_running_requests_per_dp"]),
                    ": levels %s compare unequal admission" % ", ".join(str(c) for c in above) if above else ""))


def _unset(value: Any) -> str:
    return "unset" if value is None else str(value)


def build(host, spec, baseline=None, baseline_note=None, generated_at=None, files=None):
    """The report document (see SCHEMA)."""
    spec_run = _run(spec, "spec")
    base_run = _run(baseline, "baseline") if baseline else None
    standin = bool((spec_run["server"] or {}).get("standin")) or bool(
        base_run and (base_run["server"] or {}).get("standin"))
    notes = []
    if standin:
        notes.append(STANDIN_WARNING)
    if base_run is None:
        notes.append("No baseline run: %s" % (baseline_note or "the baseline was not requested"))
    else:
        differ = [k for k in ("max_new_tokens", "num_requests", "temperature", "api", "repeats", "warmup_requests",
                              "flush_cache") if base_run["workload"].get(k) != spec_run["workload"].get(k)]
        if differ:
            notes.append("The baseline ran a different workload than the speculative run (%s): the speedup compares "
                         "unlike runs" % ", ".join(differ))
    admitted, admission_note = admission(spec_run, base_run)
    if admission_note:
        notes.append(admission_note)
    doc = dict(
        schema_version=SCHEMA_VERSION,
        generated_at=generated_at or datetime.datetime.now(datetime.timezone.utc).isoformat(),
        host=host,
        standin=standin,
        runs=dict(spec=spec_run, baseline=base_run),
        speedup=_sglang_bench.speedup(spec_run["levels"], base_run["levels"]) if base_run else [],
        baseline=dict(ran=base_run is not None, note=None if base_run else (baseline_note or "not requested")),
        admission=admitted,
        files=dict((k, os.path.basename(v)) for k, v in (files or {}).items()) or dict(
            json=None, markdown=None, throughput_png=None, accept_length_png=None),
        notes=notes,
    )
    return doc


def _fmt(value, scale=1.0, digits=1):
    if value is None:
        return "-"
    return ("%." + str(digits) + "f") % (value * scale)


def markdown(doc):
    """The report as markdown: facts, one table row per run and level, speedup, the plots."""
    spec = doc["runs"]["spec"]
    server = spec["server"] or {}
    work = spec["workload"]
    cats = ", ".join("%s %d" % (k, v) for k, v in sorted(work.get("categories", {}).items()))
    lines = ["# SGLang benchmark: %s" % doc["host"], ""]
    if doc["standin"]:
        lines += ["> **Stand-in.** %s" % STANDIN_WARNING, ""]
    lines += [
        "- generated: %s" % doc["generated_at"],
        "- server: %s, SGLang %s, speculative %s, model %s" % (spec["url"], server.get("version") or "?",
                                                               server.get("speculative_algorithm") or "-",
                                                               server.get("model_path") or "?"),
        "- workload: %d prompts (%s), %d requests per level x %s repeat(s), max_new_tokens %s, temperature %s, "
        "api %s, engine %s; warm-up before each level, %s"
        % (work["prompt_count"], cats, work["num_requests"], work.get("repeats") or 1, work["max_new_tokens"],
           work.get("temperature"), work.get("api") or "generate", work["engine"],
           "prefix cache flushed before each repeat" if work.get("flush_cache", True) else "no cache flush"),
        "- baseline: %s" % ("ran (the same workload, server without speculative decoding)" if doc["baseline"]["ran"]
                            else "not run: %s" % doc["baseline"]["note"]),
        "- admission (/server_info max_running_requests, effective per DP rank): %s" % _admission_line(doc),
        "",
        "| run | concurrency | requests | output tok/s | latency p50 / p90 / p99 (ms) | TTFT p50 / p90 / p99 (ms) "
        "| accept length | server accept length since flush | speedup [%d%% CI] |" % round(
            100 * ((doc["speedup"] or [{}])[0].get("ci_confidence") or 0.95)),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    speedups = dict((s["concurrency"], _speedup_cell(s)) for s in doc["speedup"])
    for label in ("spec", "baseline"):
        run = doc["runs"].get(label)
        if not run:
            continue
        for lvl in run["levels"]:
            lat, ttft = lvl["latency_s"], lvl["ttft_s"]
            server_accept = lvl.get("server_accept_length")
            lines.append("| %s | %d | %d | %s | %s / %s / %s | %s / %s / %s | %s | %s | %s |" % (
                label, lvl["concurrency"], lvl["succeeded"], _fmt(lvl["output_throughput"]),
                _fmt(lat["p50"], 1000, 0), _fmt(lat["p90"], 1000, 0), _fmt(lat["p99"], 1000, 0),
                _fmt(ttft["p50"], 1000, 0), _fmt(ttft["p90"], 1000, 0), _fmt(ttft["p99"], 1000, 0),
                _fmt(lvl["accept_length"], digits=2), _fmt(server_accept, digits=2),
                speedups.get(lvl["concurrency"]) or "-" if label == "spec" else "-"))
    files = doc["files"]
    lines += [""]
    if files.get("throughput_png"):
        lines += ["![output throughput vs concurrency](%s)" % files["throughput_png"], ""]
    if files.get("accept_length_png"):
        lines += ["![accept length per request](%s)" % files["accept_length_png"], ""]
    for note in doc["notes"]:
        if note != STANDIN_WARNING:
            lines.append("- %s" % note)
    return "\n".join(lines).rstrip("\n") + "\n"


def _admission_line(doc: dict) -> str:
    adm = doc.get("admission") or {}

    def arm(label):
        figures = adm.get(label)
        if not figures:
            return None
        return "%s %s (%s)" % (label, _unset(figures.get("max_running_requests")),
                               _unset(figures.get("effective_max_running_requests_per_dp")))

    parts = [p for p in (arm("spec"), arm("baseline")) if p]
    verdict = {True: "equal", False: "NOT equal", None: None}[adm.get("equal")]
    return ", ".join(parts) + ("; %s" % verdict if verdict else "")


def _speedup_cell(item: dict) -> str | None:
    if not item.get("speedup"):
        return None
    cell = _fmt(item["speedup"], digits=2) + "x"
    if item.get("speedup_ci_low") is not None and item.get("speedup_ci_high") is not None:
        cell += " [%s-%s]" % (_fmt(item["speedup_ci_low"], digits=2), _fmt(item["speedup_ci_high"], digits=2))
    elif item.get("repeats_spec", 0) < 2 or item.get("repeats_baseline", 0) < 2:
        cell += " (no CI: < 2 repeats)"
    return cell


def table_rows(text):
    """The data rows of the report's markdown table (used by tests and by the module's result)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| run ") and not line.startswith("| ---"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def write(dest, host, spec, baseline=None, baseline_note=None, timestamp=None, plots=True):
    """Build and write the report files; returns (doc, paths, markdown text)."""
    if not os.path.isdir(dest):
        raise ReportError("dest %s is not a directory on the controller; create it first (the benchmark playbook "
                          "does)" % dest)
    timestamp = timestamp or timestamp_now()
    paths = report_paths(dest, host, timestamp, plots=plots)
    doc = build(host, spec, baseline, baseline_note, files=dict((k, v) for k, v in paths.items() if v))
    for key in ("throughput_png", "accept_length_png"):
        doc["files"].setdefault(key, None)
    problems = schema_problems(doc)
    if problems:  # a bug here, not bad input: say exactly what
        raise ReportError("the report does not match its schema: %s" % "; ".join(problems[:8]))
    text = markdown(doc)
    if plots:
        write_plots(doc, paths)
    _files.atomic_write(paths["markdown"], text, 0o644)
    _files.atomic_write_json(paths["json"], doc)
    return doc, paths, text


# --- the module: its options and what one run returns -------------------------------------------------

def argument_spec() -> dict[str, dict[str, Any]]:
    """sglang_bench_report's options, the one place their types and defaults are written."""
    return dict(
        dest=dict(type="path", required=True),
        host=dict(type="str", required=True),
        spec=dict(type="dict", required=True),
        baseline=dict(type="dict"),
        baseline_note=dict(type="str"),
        timestamp=dict(type="str"),
        plots=dict(type="bool", default=True),
    )


def run(params: dict[str, Any], *, check_mode: bool) -> dict[str, Any]:
    """The report from the module's options: written, or in check mode only built; ModuleFailure on bad input."""
    dest = os.path.abspath(params["dest"])
    timestamp = params["timestamp"] or timestamp_now()
    try:
        if check_mode:
            paths = report_paths(dest, params["host"], timestamp, plots=params["plots"])
            doc = build(params["host"], params["spec"], params["baseline"], params["baseline_note"],
                        files=dict((k, v) for k, v in paths.items() if v))
            text = markdown(doc)
        else:
            doc, paths, text = write(dest, params["host"], params["spec"], params["baseline"],
                                     params["baseline_note"], timestamp, params["plots"])
    except ReportError as exc:
        raise ModuleFailure(str(exc))
    except (IOError, OSError) as exc:
        raise ModuleFailure("cannot write the report into %s: %s" % (dest, exc))
    return dict(changed=True, files=paths, speedup=doc["speedup"], markdown=text, standin=doc["standin"])
