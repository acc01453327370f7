# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_bench's run: the options checked, the prompts read, the server checked against the label,
then every concurrency level with the chosen engine.

Private to the collection: not a public API, may change without notice.

Every failure is a ModuleFailure carrying ``base`` (label, engine, url and, once the prompts are
read, the workload) plus what was measured before it; check mode stops before the first request.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from ansible_collections.gpufleet.llm.plugins.module_utils import _sglang_bench as bench
from ansible_collections.gpufleet.llm.plugins.module_utils import _sglang_bench_serving
from ansible_collections.gpufleet.llm.plugins.module_utils import _sglang_http as http
from ansible_collections.gpufleet.llm.plugins.module_utils._failure import ModuleFailure

# Above this gap between the accept length measured from the requests and the server's own figure,
# something else is likely sending requests to the server: worth a warning, not a failure.
ACCEPT_DIFF_WARN_PCT = 5.0


def _inputs(params: dict[str, Any], base: dict[str, Any]) -> tuple[str, list[dict]]:
    """(url, prompts) once every option and the prompt file are good; sets base["url"]."""
    problems = bench.validate(params["concurrency"], params["num_requests"], params["max_new_tokens"],
                              params["engine"], params["label"], params["request_timeout"])
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


def _run_builtin(url: str, requests: list[dict], params: dict[str, Any], *, server: dict[str, Any],
                 client: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """Every level with the built-in load generator, reading /server_info after each for its window."""
    levels, records = [], []
    before = server
    for concurrency in params["concurrency"]:
        level_records, wall = bench.run_level(url, requests, concurrency, request_timeout=params["request_timeout"],
                                              **client)
        after = bench.server_state(url, **client)
        level = bench.aggregate(level_records, wall, concurrency, server_before=before, server_after=after)
        before = after
        levels.append(level)
        records.extend(level_records)
        if level["failed"]:
            raise ModuleFailure(bench.level_failure_message(level, url, params["label"]), levels=levels,
                                records=records, server=server)
    return levels, records


def _warn_accept_gaps(levels: list[dict], warn: Callable[[str], None]) -> None:
    for level in levels:
        diff = level.get("accept_length_server_diff_pct")
        if diff is not None and abs(diff) > ACCEPT_DIFF_WARN_PCT:
            warn("concurrency %d: the accept length measured from the requests (%.3f) and the server's "
                 "/server_info figure (%.3f) differ by %.1f%% (other traffic on the server?)"
                 % (level["concurrency"], level["accept_length"],
                    level["server_accept_length_window"] or level["server_accept_length"], diff))


def run(params: dict[str, Any], *, check_mode: bool, run_command: Callable[..., tuple],
        warn: Callable[[str], None]) -> dict[str, Any]:
    """sglang_bench from its options: the module's result, or ModuleFailure.

    ``run_command`` is AnsibleModule.run_command's signature (engine=bench_serving runs SGLang's
    tool with it); ``warn`` receives the notices (a stand-in server, accept-length gaps).
    """
    base = dict(changed=False, label=params["label"], engine=params["engine"], url=params["url"])
    url, prompts = _inputs(params, base)
    base["workload"] = bench.workload_summary(prompts, params["num_requests"], params["max_new_tokens"],
                                              params["concurrency"], params["engine"], params["prompts"])
    if check_mode:
        return base
    requests = bench.build_requests(prompts, params["num_requests"], params["max_new_tokens"])
    client = dict(api_key=params["api_key"], validate_certs=params["validate_certs"], ca_path=params["ca_path"])
    try:
        server = bench.server_state(url, **client)
        check_label(server, params["label"], url)
        if server["standin"]:
            warn("the server at %s is the lab's SGLang stand-in: its figures come from its delay model and say "
                 "nothing about GPU performance" % url)
        if params["engine"] == "builtin":
            levels, records = _run_builtin(url, requests, params, server=server, client=client)
        else:
            levels, records = _sglang_bench_serving.run_levels(
                params["python"] or sys.executable, url, requests, levels=params["concurrency"],
                max_new_tokens=params["max_new_tokens"], api_key=params["api_key"], label=params["label"],
                server=server, run_command=run_command)
    except (bench.BenchError, http.SGLangHTTPError) as exc:
        raise ModuleFailure(str(exc), **base)
    except ModuleFailure as exc:
        raise ModuleFailure(exc.msg, **dict(exc.fields, **base))
    _warn_accept_gaps(levels, warn)
    return dict(base, server=server, levels=levels, records=records)
