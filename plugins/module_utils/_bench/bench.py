# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_bench's logic: its options, the prompt set, the server's own view and the aggregates.

Private to the collection: not a public API, may change without notice.

Standard library only, no Ansible imports (the module runs this on the GPU host).

* ``load_prompts()``: a JSONL file, one ``{"prompt", "category", "max_new_tokens"?}`` per line.
* the built-in load generator (``run_level()``, ``build_requests()``) is _sglang/load.py, the
  request shapes _sglang/chat.py: sglang_probe's accept-length sample sends the same requests.
* ``aggregate()``: throughput (output tokens / wall time of the level's repeats), p50/p90/p99 of
  latency and TTFT, and the level's accept length as total tokens / total verify steps of its
  requests (a mean of per-request ratios would weigh a 3-token request like a 300-token one). The
  server's ``/server_info`` ``avg_spec_accept_length`` is kept as information only: SGLang 0.5.23
  averages it over what the server decoded since the last ``/flush_cache`` (which resets its metrics),
  folded in at decode-log intervals.
* ``speedup()``: per level, the ratio of the arms' throughputs and its confidence interval over
  the repeats (_sglang_bench_stats says which interval and why).

SGLang's own ``sglang.bench_serving`` as the other engine is in serving.py; the module's run (engine
choice, label check, the levels in turn) is in run.py.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._bench import stats
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import chat
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import client as _sglang_http
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang.chat import DEFAULT_TEMPERATURE
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang.load import DEFAULT_REQUEST_TIMEOUT, as_number

CATEGORIES = ("chat", "code", "math")
ENGINES = ("builtin", "bench_serving")
LABELS = ("spec", "baseline")
# One line of a prompt file never needs more; a bigger one is almost certainly the wrong file.
MAX_PROMPT_CHARS = 100000
# How many failed requests a level result quotes (all are counted).
MAX_ERRORS_QUOTED = 5
PERCENTILES = (50, 90, 99)
DEFAULT_REPEATS = 3


class BenchError(Exception):
    """Bad input or a failed run; the message names the problem and the fix."""


def argument_spec() -> dict[str, dict[str, Any]]:
    """sglang_bench's options, the one place their types and defaults are written."""
    return dict(
        url=dict(type="str", default=_sglang_http.DEFAULT_URL),
        api_key=dict(type="str", no_log=True),
        admin_api_key=dict(type="str", no_log=True),
        prompts=dict(type="path", required=True),
        concurrency=dict(type="list", elements="int", default=[1, 8, 32]),
        num_requests=dict(type="int", default=32),
        max_new_tokens=dict(type="int", default=256, no_log=False),  # a count, not a secret
        engine=dict(type="str", choices=list(ENGINES), default="builtin"),
        label=dict(type="str", choices=list(LABELS), default="spec"),
        request_timeout=dict(type="float", default=DEFAULT_REQUEST_TIMEOUT),
        temperature=dict(type="float", default=DEFAULT_TEMPERATURE),
        repeats=dict(type="int", default=DEFAULT_REPEATS),
        warmup_requests=dict(type="int"),
        flush_cache=dict(type="bool", default=True),
        api=dict(type="str", choices=list(chat.APIS), default="auto"),
        python=dict(type="path"),
        validate_certs=dict(type="bool", default=True),
        ca_path=dict(type="path"),
    )


# --- inputs ----------------------------------------------------------------------------------------

def load_prompts(path):
    """The prompts of a JSONL file as a list of dicts; raises BenchError naming each bad line.

    Blank lines are skipped. Every problem in the file is reported at once (up to 10), each with
    its line number, so one run of the module fixes a hand-written file.
    """
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except (IOError, OSError) as exc:
        raise BenchError("prompts file %s cannot be read (%s); give the path of a JSONL prompt file on this host "
                         "(the benchmark playbook copies the collection's default set there)"
                         % (path, getattr(exc, "strerror", None) or exc))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BenchError("prompts file %s is not UTF-8 (%s); save it as UTF-8 JSONL" % (path, exc))
    prompts, problems = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        entry, problem = _prompt_entry(line)
        if problem:
            problems.append("line %d: %s" % (number, problem))
        else:
            entry["line"] = number
            prompts.append(entry)
    if problems:
        shown = problems[:10]
        more = len(problems) - len(shown)
        raise BenchError("prompts file %s has %d bad line(s): %s%s. Each line must be a JSON object like "
                         '{"prompt": "...", "category": "chat", "max_new_tokens": 128} (category one of %s; '
                         "max_new_tokens optional)"
                         % (path, len(problems), "; ".join(shown), " (and %d more)" % more if more else "",
                            ", ".join(CATEGORIES)))
    if not prompts:
        raise BenchError("prompts file %s has no prompts (it is empty or only blank lines); put one JSON object per "
                         'line, for example {"prompt": "Explain TCP slow start.", "category": "chat"}, or leave '
                         "prompts unset in the playbook to use the collection's default set" % path)
    return prompts


def _prompt_entry(line):
    try:
        data = json.loads(line)
    except ValueError as exc:
        return None, "not valid JSON (%s)" % exc
    if not isinstance(data, dict):
        return None, "a JSON %s, not an object" % type(data).__name__
    unknown = sorted(set(data) - {"prompt", "category", "max_new_tokens"})
    if unknown:
        return None, "unknown key(s) %s (allowed: prompt, category, max_new_tokens)" % ", ".join(unknown)
    prompt = data.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return None, "'prompt' must be a non-empty string"
    if len(prompt) > MAX_PROMPT_CHARS:
        return None, "'prompt' is %d characters long (limit %d)" % (len(prompt), MAX_PROMPT_CHARS)
    category = data.get("category")
    if category not in CATEGORIES:
        return None, "'category' must be one of %s (got %r)" % (", ".join(CATEGORIES), category)
    entry = dict(prompt=prompt, category=category)
    if "max_new_tokens" in data:
        value = data["max_new_tokens"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return None, "'max_new_tokens' must be an integer >= 1 (got %r)" % (value,)
        entry["max_new_tokens"] = value
    return entry, None


def validate(concurrency: list, num_requests: int, max_new_tokens: int, engine: str, label: str,
             request_timeout: float = DEFAULT_REQUEST_TIMEOUT, *, repeats: int = 1, temperature: float = 0.0,
             warmup_requests: int | None = None) -> list[str]:
    """Problems with the scalar parameters, as a list of messages (empty when all is well)."""
    problems = []
    if not isinstance(repeats, int) or repeats < 1:
        problems.append("repeats must be >= 1 (got %r); 3 or more give the speedup a confidence interval worth "
                        "reading" % (repeats,))
    if temperature is None or temperature < 0:
        problems.append("temperature must be >= 0 (got %r); 0 is greedy decoding" % (temperature,))
    if warmup_requests is not None and warmup_requests < 0:
        problems.append("warmup_requests must be >= 0 (got %r); leave it unset for one per concurrent slot"
                        % (warmup_requests,))
    if not concurrency:
        problems.append("concurrency is empty; give a list of levels such as [1, 8, 32]")
    else:
        bad = [c for c in concurrency if isinstance(c, bool) or not isinstance(c, int) or c < 1]
        if bad:
            problems.append("concurrency levels must be integers >= 1 (got %s); for example [1, 8, 32]"
                            % ", ".join(repr(c) for c in bad))
        elif len(set(concurrency)) != len(concurrency):
            problems.append("concurrency lists a level twice (%s); list each level once" % list(concurrency))
    if not isinstance(num_requests, int) or num_requests < 1:
        problems.append("num_requests must be >= 1 (got %r): it is the number of requests per concurrency level"
                        % (num_requests,))
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        problems.append("max_new_tokens must be >= 1 (got %r)" % (max_new_tokens,))
    if engine not in ENGINES:
        problems.append("engine must be one of %s (got %r)" % (", ".join(ENGINES), engine))
    if label not in LABELS:
        problems.append("label must be one of %s (got %r)" % (", ".join(LABELS), label))
    if request_timeout is None or request_timeout <= 0:
        problems.append("request_timeout must be > 0 seconds (got %r)" % (request_timeout,))
    return problems


def workload_summary(prompts: list[dict], params: dict[str, Any]) -> dict[str, Any]:
    """What the run sends, from the prompts and the module's params (``api`` is resolved later)."""
    categories = {}
    for prompt in prompts:
        categories[prompt["category"]] = categories.get(prompt["category"], 0) + 1
    return dict(prompts=params["prompts"], prompt_count=len(prompts), categories=categories,
                num_requests=params["num_requests"], max_new_tokens=params["max_new_tokens"],
                concurrency=list(params["concurrency"]), temperature=params["temperature"], engine=params["engine"],
                repeats=params["repeats"], warmup_requests=params["warmup_requests"],
                flush_cache=params["flush_cache"], api=params["api"], api_reason=None)


# --- the server's own view ---------------------------------------------------------------------------

def server_state(base_url, api_key=None, timeout=30.0, validate_certs=True, ca_path=None):
    """What ``/server_info`` says: version, stand-in flag, speculative algorithm, accept length and admission.

    ``/get_server_info`` is the older name (SGLang keeps both); tried when ``/server_info`` is 404.
    """
    data = None
    for path in ("/server_info", "/get_server_info"):
        status, data = _sglang_http.call(base_url, path, api_key=api_key, timeout=timeout,
                                         validate_certs=validate_certs, ca_path=ca_path)
        if status == 200 and isinstance(data, dict):
            break
        if status != 404:
            raise BenchError("GET %s%s answered %s%s; the benchmark needs the server's /server_info (check url and "
                             "api_key)" % (base_url, path, status, _detail(data)))
    else:
        raise BenchError("%s has neither /server_info nor /get_server_info: is this an SGLang server?" % base_url)
    if "decode" in data and isinstance(data["decode"], list) and data["decode"]:
        data = data["decode"][0]  # PD-disaggregated servers nest the decode side's info
    states = data.get("internal_states") or [{}]
    state = states[0] if isinstance(states[0], dict) else {}
    algorithm = data.get("speculative_algorithm")
    accept = as_number(state.get("avg_spec_accept_length"))
    if "speculative_algorithm" in data:
        speculative = bool(algorithm) and str(algorithm).upper() not in ("NONE", "NULL")
    else:
        # Without the option in /server_info, SGLang's accept-length figure is the tell: it is
        # reported only with speculative decoding.
        speculative = accept is not None
    # Admission: the resolved option (SGLang 0.5.23 resolves an unset one to 48 with speculative
    # decoding, and leaves it null without) and what the scheduler admits per DP rank.
    return dict(version=data.get("version"), standin=bool(data.get("standin", False)),
                speculative_algorithm=algorithm, speculative=speculative,
                model_path=data.get("model_path"), tokenizer_path=data.get("tokenizer_path"),
                avg_spec_accept_length=accept, max_running_requests=as_number(data.get("max_running_requests")),
                effective_max_running_requests_per_dp=as_number(state.get("effective_max_running_requests_per_dp")))


def _detail(data):
    text = _sglang_http.error_text(data)
    return " (%s)" % text if text else ""


# --- the built-in load generator ---------------------------------------------------------------------

# --- aggregates ---------------------------------------------------------------------------------------

def percentile(values, pct):
    """Linear interpolation between closest ranks (numpy's default): p50 of [1, 2, 3, 4] is 2.5."""
    data = sorted(values)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    rank = (len(data) - 1) * pct / 100.0
    low = int(math.floor(rank))
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


def distribution(values):
    values = [v for v in values if v is not None]
    if not values:
        return dict(mean=None, p50=None, p90=None, p99=None, max=None)
    out = dict(mean=sum(values) / len(values), max=max(values))
    for pct in PERCENTILES:
        out["p%d" % pct] = percentile(values, pct)
    return out


def repeat_summary(records: list[dict], wall: float, repeat: int) -> dict[str, Any]:
    """One measured repeat of a level: its throughput and accept length, for the interval."""
    ok = [r for r in records if r["ok"]]
    tokens = sum(r["output_tokens"] for r in ok)
    spec = [r for r in ok if r["spec_verify_ct"]]
    steps = sum(r["spec_verify_ct"] for r in spec)
    return dict(repeat=repeat, requests=len(records), wall_seconds=wall, output_tokens=tokens,
                output_throughput=(tokens / wall) if wall > 0 else None,
                accept_length=(sum(r["output_tokens"] for r in spec) / float(steps)) if steps else None)


def aggregate(records: list[dict], wall: float, concurrency: int, server_after: dict | None = None,
              repeats: list[dict] | None = None) -> dict[str, Any]:
    """The aggregates of one level over all its repeats (see docs/benchmark.md for every key).

    ``wall`` is the measured wall time of all repeats together (warm-up and flushes excluded);
    ``repeats`` the repeat_summary() of each (default: the records as one repeat).
    """
    ok = [r for r in records if r["ok"]]
    failed = [r for r in records if not r["ok"]]
    output_tokens = sum(r["output_tokens"] for r in ok)
    spec = [r for r in ok if r["spec_verify_ct"]]
    verify_steps = sum(r["spec_verify_ct"] for r in spec)
    accept = (sum(r["output_tokens"] for r in spec) / float(verify_steps)) if verify_steps else None
    return dict(
        concurrency=concurrency,
        requests=len(records),
        succeeded=len(ok),
        failed=len(failed),
        errors=[r["error"] for r in failed[:MAX_ERRORS_QUOTED]],
        wall_seconds=wall,
        output_tokens=output_tokens,
        prompt_tokens=sum(r["prompt_tokens"] or 0 for r in ok),
        output_throughput=(output_tokens / wall) if wall > 0 else None,
        request_throughput=(len(ok) / wall) if wall > 0 else None,
        latency_s=distribution([r["latency"] for r in ok]),
        ttft_s=distribution([r["ttft"] for r in ok]),
        accept_length=accept,
        accept_length_source="requests" if verify_steps else None,
        verify_steps=verify_steps,
        # Information only: SGLang's average since the last /flush_cache, folded at decode-log intervals.
        server_accept_length=(server_after or {}).get("avg_spec_accept_length"),
        repeats=repeats if repeats is not None else [repeat_summary(records, wall, 0)],
        source="builtin",
    )


def speedup(spec_levels, baseline_levels):
    """Per concurrency level present in both: spec vs baseline output throughput, latency, and the
    speedup's confidence interval over the repeats (_sglang_bench_stats.speedup_interval)."""
    base = dict((lvl["concurrency"], lvl) for lvl in baseline_levels or [])
    out = []
    for lvl in spec_levels or []:
        other = base.get(lvl["concurrency"])
        if not other:
            continue
        s_tp, b_tp = lvl.get("output_throughput"), other.get("output_throughput")
        s_lat, b_lat = (lvl.get("latency_s") or {}).get("p50"), (other.get("latency_s") or {}).get("p50")
        interval = stats.speedup_interval(_repeat_throughputs(lvl), _repeat_throughputs(other))
        out.append(dict(concurrency=lvl["concurrency"], spec_output_throughput=s_tp, baseline_output_throughput=b_tp,
                        speedup=(s_tp / b_tp) if s_tp and b_tp else None,
                        latency_p50_ratio=(b_lat / s_lat) if s_lat and b_lat else None,
                        speedup_ci_low=interval["low"], speedup_ci_high=interval["high"],
                        ci_confidence=interval["confidence"], ci_method=interval["method"],
                        repeats_spec=interval["repeats_spec"], repeats_baseline=interval["repeats_baseline"]))
    return out


def _repeat_throughputs(level: dict) -> list[float]:
    values = [r.get("output_throughput") for r in level.get("repeats") or []]
    values = [v for v in values if v]
    return values or ([level["output_throughput"]] if level.get("output_throughput") else [])


def level_failure_message(level, base_url, label):
    return ("%d of %d requests failed at concurrency %d against %s (%s run); first error(s): %s. The server may "
            "have restarted or stopped mid-run (journalctl -u the sglang unit), or a request was rejected; fix it "
            "and run the benchmark again"
            % (level["failed"], level["requests"], level["concurrency"], base_url, label, " | ".join(level["errors"])))
