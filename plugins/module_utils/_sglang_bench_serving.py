# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_bench's other engine: SGLang's own ``python -m sglang.bench_serving``, one run per level.

Private to the collection: not a public API, may change without notice.

* ``bench_serving_command()``: the argv of one level, the requests given as a ShareGPT dataset
  (``sharegpt_dataset()``); the API key goes in the environment, never on argv.
* ``parse_bench_serving()``: its JSONL result line (keys as SGLang writes them: ``output_throughput``,
  ``accept_length``, ``median_e2e_latency_ms``, ...) in the level shape of the built-in engine.
* ``run_levels()``: every level in turn with the interpreter that has SGLang.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Callable

from ansible_collections.gpufleet.llm.plugins.module_utils import _sglang_bench as bench
from ansible_collections.gpufleet.llm.plugins.module_utils._failure import ModuleFailure

BENCH_SERVING_MODULE = "sglang.bench_serving"
# Exits 0 when `sglang.bench_serving` is importable (find_spec imports the sglang package only).
PROBE_SNIPPET = ("import importlib.util, sys\n"
                 "try:\n    spec = importlib.util.find_spec('sglang.bench_serving')\n"
                 "except Exception:\n    spec = None\nsys.exit(0 if spec else 3)\n")


def sharegpt_dataset(requests: list[dict]) -> list[dict]:
    """The requests as a ShareGPT-format dataset, the form bench_serving reads with ``--dataset-path``.

    bench_serving samples its prompts from such a file; the reply turn is empty because
    ``--sharegpt-output-len`` fixes the output length instead.
    """
    return [{"id": "gpufleet-%d" % r["index"],
             "conversations": [{"from": "human", "value": r["prompt"]}, {"from": "gpt", "value": ""}]}
            for r in requests]


def bench_serving_command(python, base_url, dataset_path, output_file, num_requests, max_new_tokens, concurrency,
                          seed=1):
    """argv for one level. The API key is NOT here: bench_serving reads it from OPENAI_API_KEY."""
    return [python, "-m", BENCH_SERVING_MODULE, "--backend", "sglang", "--base-url", base_url,
            "--dataset-name", "sharegpt", "--dataset-path", dataset_path,
            "--num-prompts", str(num_requests), "--sharegpt-output-len", str(max_new_tokens),
            "--max-concurrency", str(concurrency), "--request-rate", "inf",
            "--output-file", output_file, "--output-details", "--disable-tqdm", "--seed", str(seed)]


def parse_bench_serving(text: str, concurrency: int | None = None) -> tuple[dict, list[dict]]:
    """One level from bench_serving's ``--output-file`` text (JSONL: it appends one line per run).

    Reads the last line. Returns (level, records); records are built from ``--output-details``
    lists when present (latency = ttft + the inter-token latencies), else empty.
    """
    # Only JSON-object lines: bench_serving writes nothing else there, and anything else (a
    # comment, a truncated write) must not hide the last complete result.
    lines = [line for line in (text or "").splitlines() if line.lstrip().startswith("{")]
    if not lines:
        raise bench.BenchError("bench_serving wrote no result line to its output file (did it fail? see its stdout)")
    try:
        data = json.loads(lines[-1])
    except ValueError as exc:
        raise bench.BenchError("bench_serving's output file does not end with a JSON line (%s)" % exc)
    if not isinstance(data, dict) or "output_throughput" not in data:
        raise bench.BenchError("bench_serving's result has no output_throughput: not a bench_serving result "
                               "(keys: %s)" % ", ".join(sorted(data)[:20] if isinstance(data, dict) else []))

    def sec(key):
        value = bench.as_number(data.get(key))
        return value / 1000.0 if value is not None else None

    level_c = data.get("max_concurrency") or concurrency
    records = []
    ttfts, itls, outs = data.get("ttfts"), data.get("itls"), data.get("output_lens")
    errors, inputs = data.get("errors") or [], data.get("input_lens") or []
    if isinstance(ttfts, list) and isinstance(outs, list):
        for i, ttft in enumerate(ttfts):
            err = errors[i] if i < len(errors) else ""
            itl = itls[i] if isinstance(itls, list) and i < len(itls) and isinstance(itls[i], list) else []
            records.append(dict(index=i, category=None, ok=not err, error=err or None, ttft=ttft,
                                latency=(ttft or 0.0) + sum(itl), prompt_tokens=inputs[i] if i < len(inputs) else None,
                                output_tokens=outs[i] if i < len(outs) else 0, spec_verify_ct=None,
                                accept_length=None, concurrency=level_c))
    completed = int(data.get("completed") or 0)
    failed = sum(1 for r in records if not r["ok"])
    level = dict(
        concurrency=level_c,
        requests=completed + failed,
        succeeded=completed,
        failed=failed,
        errors=[r["error"] for r in records if not r["ok"]][:bench.MAX_ERRORS_QUOTED],
        wall_seconds=bench.as_number(data.get("duration")),
        output_tokens=bench.as_number(data.get("total_output_tokens")),
        prompt_tokens=bench.as_number(data.get("total_input_tokens")),
        output_throughput=bench.as_number(data.get("output_throughput")),
        request_throughput=bench.as_number(data.get("request_throughput")),
        latency_s=dict(mean=sec("mean_e2e_latency_ms"), p50=sec("median_e2e_latency_ms"), p90=None,
                       p99=sec("p99_e2e_latency_ms"), max=None),
        ttft_s=dict(mean=sec("mean_ttft_ms"), p50=sec("median_ttft_ms"), p90=None, p99=sec("p99_ttft_ms"), max=None),
        # bench_serving reads the accept length from the server's /get_server_info after the run.
        accept_length=bench.as_number(data.get("accept_length")),
        verify_steps=None,
        server_accept_length=bench.as_number(data.get("accept_length")),
        server_accept_length_window=None,
        server_verify_steps_window=None,
        accept_length_server_diff_pct=None,
        source="bench_serving",
    )
    if records and all(r["latency"] is not None for r in records if r["ok"]):
        lat = bench.distribution([r["latency"] for r in records if r["ok"]])
        level["latency_s"]["p90"] = lat["p90"]
        level["latency_s"]["max"] = lat["max"]
        ttft = bench.distribution([r["ttft"] for r in records if r["ok"]])
        level["ttft_s"]["p90"] = ttft["p90"]
        level["ttft_s"]["max"] = ttft["max"]
    return level, records


def run_levels(python: str, url: str, requests: list[dict], *, levels: list[int], max_new_tokens: int,
               api_key: str | None, label: str, server: dict, run_command: Callable[..., tuple]
               ) -> tuple[list[dict], list[dict]]:
    """Every concurrency level through bench_serving: (levels, records), or ModuleFailure.

    A failure carries the levels and records finished before it and ``server`` (the server's state
    before the run), except when ``python`` cannot import bench_serving at all (nothing ran).
    ``run_command`` is AnsibleModule.run_command's.
    """
    rc, _out, err = run_command([python, "-c", PROBE_SNIPPET], cwd="/")
    if rc != 0:
        raise ModuleFailure("engine=bench_serving: %s cannot import %s (rc %d%s); install SGLang into that "
                            "interpreter, point python at the one that has it, or use engine=builtin"
                            % (python, BENCH_SERVING_MODULE, rc, (": " + err.strip()[-300:]) if err else ""))
    environ = {"OPENAI_API_KEY": api_key} if api_key else None
    work = tempfile.mkdtemp(prefix="gpufleet-bench-serving-")
    done, records = [], []
    try:
        dataset = os.path.join(work, "dataset.json")
        with open(dataset, "w") as handle:
            json.dump(sharegpt_dataset(requests), handle)
        for concurrency in levels:
            output = os.path.join(work, "result-c%d.jsonl" % concurrency)
            argv = bench_serving_command(python, url, dataset, output, len(requests), max_new_tokens, concurrency)
            # cwd /: a stray sglang/ in the working directory must not stand in for the installed one.
            rc, out, err = run_command(argv, cwd="/", environ_update=environ)
            if rc != 0 or not os.path.exists(output):
                raise ModuleFailure("%s exited %d at concurrency %d: %s"
                                    % (BENCH_SERVING_MODULE, rc, concurrency, (err or out)[-1500:]),
                                    levels=done, records=records, server=server)
            with open(output) as handle:
                level, level_records = parse_bench_serving(handle.read(), concurrency)
            done.append(level)
            records.extend(level_records)
            if level["failed"]:
                raise ModuleFailure(bench.level_failure_message(level, url, label), levels=done, records=records,
                                    server=server)
    except bench.BenchError as exc:
        raise ModuleFailure(str(exc), levels=done, records=records, server=server)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return done, records
