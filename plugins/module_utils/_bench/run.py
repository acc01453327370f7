# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_bench's run: the options checked, the prompts read, the server checked against the label,
the API chosen (chat for a chat model), then every concurrency level with the chosen engine.

Per level, with the built-in engine: warm-up requests (not measured), then for each repeat a
``/flush_cache`` and the measured requests. Both arms (the speculative server and the baseline)
run this same sequence, so neither measures a cold, just-restarted server against a warm one, nor
a prefix cache the other did not have.

Private to the collection: not a public API, may change without notice.

Every failure is a ModuleFailure carrying ``base`` (label, engine, url and, once the prompts are
read, the workload) plus what was measured before it; check mode stops before the first request.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from ansible_collections.gpufleet.llm.plugins.module_utils._bench import bench
from ansible_collections.gpufleet.llm.plugins.module_utils._bench import serving as _sglang_bench_serving
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import chat
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import client as http
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import load as _load
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure

# Seconds /flush_cache may wait for the server to become idle (SGLang's own bench uses 60).
FLUSH_TIMEOUT = 60.0


def _inputs(params: dict[str, Any], base: dict[str, Any]) -> tuple[str, list[dict]]:
    """(url, prompts) once every option and the prompt file are good; sets base["url"]."""
    problems = bench.validate(params["concurrency"], params["num_requests"], params["max_new_tokens"],
                              params["engine"], params["label"], params["request_timeout"],
                              repeats=params["repeats"], temperature=params["temperature"],
                              warmup_requests=params["warmup_requests"])
    try:
        url = http.validate_base_url(params["url"])
    except http.SGLangHTTPError as exc:
        problems.append(str(exc))
    if problems:
        raise ModuleFailure("; ".join(problems), **base)
    base["url"] = url
    try:
        prompts = bench.load_prompts(params["prompts"])
    except bench.BenchError as exc:
        raise ModuleFailure(str(exc), **base)
    return url, prompts


def check_label(server: dict[str, Any], label: str, url: str) -> None:
    """A spec run needs a speculative server and a baseline run one without: the label must not lie."""
    algorithm = server.get("speculative_algorithm")
    if label == "spec" and not server["speculative"]:
        raise ModuleFailure("label is spec but the server at %s runs without speculative decoding (/server_info "
                            "speculative_algorithm is %r, no avg_spec_accept_length); benchmark it with "
                            "label=baseline, or check that the speculative config is the one loaded"
                            % (url, algorithm), server=server)
    if label == "baseline" and server["speculative"]:
        raise ModuleFailure("label is baseline but the server at %s still runs speculative decoding "
                            "(speculative_algorithm %s): the baseline config did not take effect; check the "
                            "systemd drop-in and that the service restarted" % (url, algorithm), server=server)


def flush_cache(base_url: str, *, api_key: str | None = None, admin_api_key: str | None = None,
                validate_certs: bool = True, ca_path: str | None = None) -> str | None:
    """``POST /flush_cache``: None when flushed, else why not (a server without the route).

    SGLang 0.5.23 marks /flush_cache ``AuthLevel.ADMIN_OPTIONAL`` (sglang/srt/utils/auth.py
    ``decide_request_auth``): with an admin-api-key the server takes only that key as its Bearer
    token (the api-key no longer opens it), else the api-key, else none. So the admin key is sent
    when given, the API key otherwise.

    Raises bench.BenchError when the server refuses: with ``?timeout=`` SGLang waits up to FLUSH_TIMEOUT
    seconds for the server to go idle, then answers 400 "Timed out waiting for idle state." if requests are
    still in flight (other traffic would also skew the figures). SGLang answers 200 with plain text, not JSON.
    """
    path = "/flush_cache?timeout=%d" % FLUSH_TIMEOUT
    key = admin_api_key or api_key
    try:
        status, data = http.call(base_url, path, method="POST", api_key=key, timeout=FLUSH_TIMEOUT + 30,
                                 validate_certs=validate_certs, ca_path=ca_path)
    except http.SGLangHTTPError as exc:
        if exc.status == 200:  # the text answer: flushed
            return None
        raise bench.BenchError("could not flush the server's cache: %s" % exc)
    if 200 <= status < 300:
        return None
    if status in (404, 405):
        return "%s has no POST /flush_cache (answered %d): the prefix cache was not flushed" % (base_url, status)
    if status in (401, 403):
        raise bench.BenchError("POST %s/flush_cache answered %d: %s" % (
            base_url, status, "the server refused the admin_api_key given (not its admin-api-key)" if admin_api_key
            else "the server has an admin-api-key, which its admin endpoints require: set admin_api_key "
                 "(the sglang role's sglang_admin_api_key), or flush_cache=false"))
    raise bench.BenchError("POST %s/flush_cache answered %d%s: the server did not flush its cache (it refuses while "
                           "requests are running: is something else sending requests to it?)"
                           % (base_url, status, _detail(data)))


def _detail(data: Any) -> str:
    text = http.error_text(data)
    return " (%s)" % text if text else ""


def _warm_up(url: str, requests: list[dict], concurrency: int, params: dict[str, Any], *,
             call: dict[str, Any]) -> None:
    """Requests that are not measured: the first requests after a start pay for compilation and
    graph capture, which a just-restarted baseline would otherwise pay inside its figures."""
    count = concurrency if params["warmup_requests"] is None else params["warmup_requests"]
    if count < 1:
        return
    warm = [dict(r, index=i) for i, r in enumerate((requests * count)[:count])]
    records, _wall = _load.run_level(url, warm, concurrency, **call)
    bad = [r for r in records if not r["ok"]]
    if bad:
        raise ModuleFailure("warm-up at concurrency %d failed: %s; the server is not ready to be measured"
                            % (concurrency, bad[0]["error"]))


def _run_builtin(url: str, requests: list[dict], params: dict[str, Any], *, server: dict[str, Any],
                 client: dict[str, Any], warn: Callable[[str], None]) -> tuple[list[dict], list[dict]]:
    """Every level with the built-in load generator: warm-up, then per repeat a flush and the requests."""
    levels, records = [], []
    call = dict(client, request_timeout=params["request_timeout"], api=params["api"],
                temperature=params["temperature"])
    for concurrency in params["concurrency"]:
        _warm_up(url, requests, concurrency, params, call=call)
        level_records, repeats, wall = [], [], 0.0
        for repeat in range(params["repeats"]):
            if params["flush_cache"]:
                why_not = flush_cache(url, admin_api_key=params.get("admin_api_key"), **client)
                if why_not:
                    warn(why_not)
            run_records, run_wall = _load.run_level(url, requests, concurrency, **call)
            for record in run_records:
                record["repeat"] = repeat
            level_records.extend(run_records)
            repeats.append(bench.repeat_summary(run_records, run_wall, repeat))
            wall += run_wall
            if any(not r["ok"] for r in run_records):
                break
        after = bench.server_state(url, **client)
        level = bench.aggregate(level_records, wall, concurrency, server_after=after, repeats=repeats)
        levels.append(level)
        records.extend(level_records)
        if level["failed"]:
            raise ModuleFailure(bench.level_failure_message(level, url, params["label"]), levels=levels,
                                records=records, server=server)
    return levels, records


def run(params: dict[str, Any], *, check_mode: bool, run_command: Callable[..., tuple],
        warn: Callable[[str], None]) -> dict[str, Any]:
    """sglang_bench from its options: the module's result, or ModuleFailure.

    ``run_command`` is AnsibleModule.run_command's signature (engine=bench_serving runs SGLang's
    tool with it); ``warn`` receives the notices (a stand-in server, accept-length gaps).
    """
    base = dict(changed=False, label=params["label"], engine=params["engine"], url=params["url"])
    url, prompts = _inputs(params, base)
    base["workload"] = bench.workload_summary(prompts, params)
    if check_mode:
        return base
    requests = _load.build_requests(prompts, params["num_requests"], params["max_new_tokens"])
    client = dict(api_key=params["api_key"], validate_certs=params["validate_certs"], ca_path=params["ca_path"])
    try:
        server = bench.server_state(url, **client)
        check_label(server, params["label"], url)
        if server["standin"]:
            warn("the server at %s is the lab's SGLang stand-in: its figures come from its delay model and say "
                 "nothing about GPU performance" % url)
        api, why = chat.resolve_api(params["api"], server)
        base["workload"].update(api=api, api_reason=why)
        params = dict(params, api=api)
        if params["engine"] == "builtin":
            levels, records = _run_builtin(url, requests, params, server=server, client=client, warn=warn)
        else:
            levels, records = _sglang_bench_serving.run_levels(
                params["python"] or sys.executable, url, requests, params=params, server=server,
                run_command=run_command)
    except (bench.BenchError, _load.LoadError, http.SGLangHTTPError) as exc:
        raise ModuleFailure(str(exc), **base)
    except ModuleFailure as exc:
        raise ModuleFailure(exc.msg, **dict(exc.fields, **base))
    return dict(base, server=server, levels=levels, records=records)
