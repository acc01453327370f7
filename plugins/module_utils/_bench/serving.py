# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_bench's other engine: SGLang's own serving benchmark, one run per level and repeat.

Private to the collection: not a public API, may change without notice.

SGLang 0.5.23 moved it to ``sglang.benchmark.serving`` and keeps ``sglang.bench_serving`` as a
deprecated alias (it re-exports the new module and warns); the probe picks the new name when the
interpreter has it and falls back to the old one (releases before the move).

* ``bench_serving_command()``: the argv of one run, the requests given as a ShareGPT dataset
  (``sharegpt_dataset()``); the API key goes in the environment, never on argv. Its own
  ``--warmup-requests`` and ``--flush-cache`` warm the server and flush its prefix cache before
  every measured run, so both arms start alike.
* With ``sglang.benchmark.serving`` it runs under ``DRIVER``: the tool's own ``cli_main()``, with
  its ``calculate_metrics()`` wrapped to save each request's ``spec_accept_length`` (SGLang's
  ``completion_tokens / spec_verify_ct`` of that request) next to the result: its result file has
  only ``accept_length``, the server's ``avg_spec_accept_length`` since the last ``/flush_cache``,
  folded at decode-log intervals.
* ``parse_bench_serving()``: its JSONL result line (keys as SGLang writes them: ``output_throughput``,
  ``accept_length``, ``median_e2e_latency_ms``, ...) in the level shape of the built-in engine.
* ``run_levels()``: every level and repeat in turn with the interpreter that has SGLang.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Callable

from ansible_collections.gpufleet.llm.plugins.module_utils._bench import bench
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure

SERVING_MODULE = "sglang.benchmark.serving"
LEGACY_MODULE = "sglang.bench_serving"
BENCH_SERVING_MODULE = LEGACY_MODULE  # the name the messages and docs use for the tool
# Prints the module to run: the new name when the interpreter has it, else the deprecated one;
# exits 3 with neither (find_spec imports the parent packages only).
PROBE_SNIPPET = ("import importlib.util, sys\n"
                 "for name in (%r, %r):\n"
                 "    try:\n        spec = importlib.util.find_spec(name)\n"
                 "    except Exception:\n        spec = None\n"
                 "    if spec:\n        print(name)\n        sys.exit(0)\n"
                 "sys.exit(3)\n" % (SERVING_MODULE, LEGACY_MODULE))
# Runs sglang.benchmark.serving's CLI with calculate_metrics() wrapped: argv[1] is the file for the
# per-request figures, the rest are the tool's own arguments. Every request's output is saved, in
# request order, before the tool computes its metrics from them.
# With ADMIN_KEY_ENV in its environment (taken out at once), the tool's flush_server_cache() runs with
# get_auth_headers() answering that key: SGLang 0.5.23's /flush_cache is ADMIN_OPTIONAL, so a server with an
# admin-api-key takes only that key there, while every request still sends OPENAI_API_KEY (the api-key).
ADMIN_KEY_ENV = "GPUFLEET_SGLANG_ADMIN_API_KEY"
DRIVER = (
    "import json, os, sys\n"
    "from sglang.benchmark import serving\n"
    "side = sys.argv[1]\n"
    "admin = os.environ.pop(%r, '')\n"
    "if admin:\n"
    "    flush = serving.flush_server_cache\n"
    "    def flush_server_cache(*args, **kwargs):\n"
    "        auth = serving.get_auth_headers\n"
    "        serving.get_auth_headers = lambda: {'Authorization': 'Bearer ' + admin}\n"
    "        try:\n"
    "            return flush(*args, **kwargs)\n"
    "        finally:\n"
    "            serving.get_auth_headers = auth\n"
    "    serving.flush_server_cache = flush_server_cache\n"
    "original = serving.calculate_metrics\n"
    "def calculate_metrics(*args, **kwargs):\n"
    "    outputs = kwargs.get('outputs', args[1] if len(args) > 1 else [])\n"
    "    with open(side, 'w') as handle:\n"
    "        json.dump([dict(success=bool(getattr(o, 'success', False)), output_len=getattr(o, 'output_len', 0),\n"
    "                        spec_accept_length=getattr(o, 'spec_accept_length', 0.0) or 0.0) for o in outputs],\n"
    "                  handle)\n"
    "    return original(*args, **kwargs)\n"
    "serving.calculate_metrics = calculate_metrics\n"
    "sys.argv = ['sglang.benchmark.serving'] + sys.argv[2:]\n"
    "serving.cli_main()\n"
) % ADMIN_KEY_ENV


def sharegpt_dataset(requests: list[dict]) -> list[dict]:
    """The requests as a ShareGPT-format dataset, the form bench_serving reads with ``--dataset-path``.

    bench_serving samples its prompts from such a file; the reply turn is empty because
    ``--sharegpt-output-len`` fixes the output length instead.
    """
    return [{"id": "gpufleet-%d" % r["index"],
             "conversations": [{"from": "human", "value": r["prompt"]}, {"from": "gpt", "value": ""}]}
            for r in requests]


def bench_serving_command(python: str, base_url: str, dataset_path: str, output_file: str, *, num_requests: int,
                          concurrency: int, params: dict, module: str = LEGACY_MODULE,
                          side_file: str | None = None, seed: int = 1) -> list[str]:
    """argv for one run. The API key is NOT here: bench_serving reads it from OPENAI_API_KEY.

    ``params`` are sglang_bench's (max_new_tokens, temperature, api, warmup_requests, flush_cache).
    With ``module`` sglang.benchmark.serving and a ``side_file``, the tool runs under DRIVER.
    """
    warmup = concurrency if params.get("warmup_requests") is None else params["warmup_requests"]
    head = [python, "-c", DRIVER, side_file] if module == SERVING_MODULE and side_file else [python, "-m", module]
    chat = params.get("api") == "chat"
    temperature = params.get("temperature", 0.0)
    argv = head + ["--backend", "sglang-oai-chat" if chat else "sglang",
                   "--base-url", base_url, "--dataset-name", "sharegpt", "--dataset-path", dataset_path,
                   "--num-prompts", str(num_requests), "--sharegpt-output-len", str(params["max_new_tokens"]),
                   "--max-concurrency", str(concurrency), "--request-rate", "inf",
                   "--temperature", str(temperature), "--warmup-requests", str(warmup),
                   "--output-file", output_file, "--output-details", "--disable-tqdm", "--seed", str(seed)]
    if chat:
        # The sglang backend (/generate) puts --temperature into sampling_params (the extra body would land at
        # the payload's top level, where /generate drops it); the chat backend ignores --temperature and
        # sends 0.0 unless the extra body names one.
        argv += ["--extra-request-body", json.dumps({"temperature": temperature})]
    if params.get("flush_cache", True):
        argv.append("--flush-cache")
    return argv


def apply_side_file(level: dict, records: list[dict], side: list) -> None:
    """Per-request accept lengths from DRIVER's file into ``records``, and the level's from them."""
    tokens = steps = 0
    for record, output in zip(records, side if isinstance(side, list) else []):
        accept = bench.as_number((output or {}).get("spec_accept_length"))
        if not record["ok"] or not accept or accept <= 0:
            continue
        record["accept_length"] = accept
        record["spec_verify_ct"] = int(round(record["output_tokens"] / accept))
        tokens += record["output_tokens"]
        steps += record["spec_verify_ct"]
    if steps:
        level.update(accept_length=tokens / float(steps), verify_steps=steps, accept_length_source="requests")


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
        # Its own accept_length is /server_info's average since the last flush: the level's own figure comes
        # from the per-request accept lengths (apply_side_file) when the driver saved them.
        accept_length=None,
        accept_length_source=None,
        verify_steps=None,
        server_accept_length=bench.as_number(data.get("accept_length")),
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


def _probe(python: str, run_command: Callable[..., tuple]) -> str:
    rc, out, err = run_command([python, "-c", PROBE_SNIPPET], cwd="/")
    lines = (out or "").strip().splitlines()
    if rc != 0 or not lines or lines[-1] not in (SERVING_MODULE, LEGACY_MODULE):
        raise ModuleFailure("engine=bench_serving: %s cannot import %s or %s (rc %d%s); install SGLang into that "
                            "interpreter, point python at the one that has it, or use engine=builtin"
                            % (python, SERVING_MODULE, LEGACY_MODULE, rc,
                               (": " + err.strip()[-300:]) if err else ""))
    return lines[-1]


def _one_run(argv: list[str], output: str, side: str, *, concurrency: int, environ: dict | None,
             run_command: Callable[..., tuple]) -> tuple[dict, list[dict]]:
    # cwd /: a stray sglang/ in the working directory must not stand in for the installed one.
    rc, out, err = run_command(argv, cwd="/", environ_update=environ)
    if rc != 0 or not os.path.exists(output):
        raise bench.BenchError("%s exited %d at concurrency %d: %s"
                               % (BENCH_SERVING_MODULE, rc, concurrency, (err or out)[-1500:]))
    with open(output) as handle:
        level, records = parse_bench_serving(handle.read(), concurrency)
    if os.path.exists(side):
        try:
            with open(side) as handle:
                apply_side_file(level, records, json.load(handle))
        except ValueError:
            pass  # a torn side file: the level keeps no accept length rather than a wrong one
    return level, records


def combine(runs: list[tuple[dict, list[dict]]]) -> dict:
    """One level from its repeated runs: sums, pooled throughput, distributions over all requests."""
    levels = [lvl for lvl, _records in runs]
    records = [r for _lvl, recs in runs for r in recs]
    if len(levels) == 1:
        level = dict(levels[0])
    else:
        level = dict(levels[-1])
        for key in ("requests", "succeeded", "failed", "wall_seconds", "output_tokens", "prompt_tokens"):
            values = [lvl.get(key) for lvl in levels]
            level[key] = sum(values) if all(v is not None for v in values) else None
        level["errors"] = [e for lvl in levels for e in lvl["errors"]][:bench.MAX_ERRORS_QUOTED]
        wall = level["wall_seconds"]
        level["output_throughput"] = level["output_tokens"] / wall if wall and level["output_tokens"] else None
        level["request_throughput"] = level["succeeded"] / wall if wall else None
        ok = [r for r in records if r["ok"]]
        if ok and all(r["latency"] is not None for r in ok):
            level["latency_s"] = bench.distribution([r["latency"] for r in ok])
            level["ttft_s"] = bench.distribution([r["ttft"] for r in ok])
        spec = [r for r in ok if r.get("spec_verify_ct")]
        steps = sum(r["spec_verify_ct"] for r in spec)
        level.update(accept_length=(sum(r["output_tokens"] for r in spec) / float(steps)) if steps else None,
                     verify_steps=steps or None, accept_length_source="requests" if steps else None)
    level["repeats"] = [dict(repeat=i, requests=lvl["requests"], wall_seconds=lvl["wall_seconds"],
                             output_tokens=lvl["output_tokens"], output_throughput=lvl["output_throughput"],
                             accept_length=lvl["accept_length"]) for i, lvl in enumerate(levels)]
    return level


def run_levels(python: str, url: str, requests: list[dict], *, params: dict, server: dict,
               run_command: Callable[..., tuple]) -> tuple[list[dict], list[dict]]:
    """Every concurrency level, ``params["repeats"]`` runs each, through SGLang's tool: (levels, records).

    A failure (ModuleFailure) carries the levels and records finished before it and ``server``
    (the server's state before the run), except when ``python`` has neither module (nothing ran).
    ``run_command`` is AnsibleModule.run_command's.
    """
    module = _probe(python, run_command)
    environ = {"OPENAI_API_KEY": params["api_key"]} if params.get("api_key") else None
    if params.get("admin_api_key") and params.get("flush_cache", True):
        if module != SERVING_MODULE:
            raise ModuleFailure("engine=bench_serving: %s sends one key to every endpoint, but a server with an "
                                "admin-api-key takes only that key at /flush_cache and only the api-key elsewhere; "
                                "use engine=builtin, SGLang with %s, or flush_cache=false" % (module, SERVING_MODULE),
                                server=server)
        environ = dict(environ or {}, **{ADMIN_KEY_ENV: params["admin_api_key"]})
    work = tempfile.mkdtemp(prefix="gpufleet-bench-serving-")
    done, records = [], []
    try:
        dataset = os.path.join(work, "dataset.json")
        with open(dataset, "w") as handle:
            json.dump(sharegpt_dataset(requests), handle)
        for concurrency in params["concurrency"]:
            runs = []
            for repeat in range(params.get("repeats") or 1):
                output = os.path.join(work, "result-c%d-r%d.jsonl" % (concurrency, repeat))
                side = os.path.join(work, "requests-c%d-r%d.json" % (concurrency, repeat))
                argv = bench_serving_command(python, url, dataset, output, num_requests=len(requests),
                                             concurrency=concurrency, params=params, module=module, side_file=side)
                level, level_records = _one_run(argv, output, side, concurrency=concurrency, environ=environ,
                                                run_command=run_command)
                for record in level_records:
                    record["repeat"] = repeat
                runs.append((level, level_records))
                if level["failed"]:
                    break
            level = combine(runs)
            done.append(level)
            records.extend(r for _lvl, recs in runs for r in recs)
            if level["failed"]:
                raise ModuleFailure(bench.level_failure_message(level, url, params["label"]), levels=done,
                                    records=records, server=server)
    except bench.BenchError as exc:
        raise ModuleFailure(str(exc), levels=done, records=records, server=server)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return done, records
