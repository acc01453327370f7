# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_probe's logic: is the SGLang server at a URL up, serving the expected model, generating,
and (for a speculative server) accepting enough draft tokens?

Private to the collection: not a public API, may change without notice. No Ansible imports.

Order of the checks, each failing with what failed, the URL path, the numbers and a fix:

1. ``/health`` until 200 (``timeout``/``interval``): loading a 589 GB model takes many minutes.
   With ``unit``, the service is read before every pause (``_sglang_unit``): a unit that failed,
   crashed or was restarted during the wait fails the probe at once, with its journal.
2. ``/model_info`` (``/get_model_info`` on older servers): ``model_path`` equals
   ``expect_model_path`` after ``os.path.normpath`` on both. Deliberately not ``realpath``: the role
   configures the server with the verified commit directory, and a server started on
   ``<name>/current`` would "match" a new commit through the symlink while still holding the old
   weights in memory.
3. Smoke generation (``POST /generate``, temperature 0): at least one token comes back; its
   ``completion_tokens / spec_verify_ct`` is the request's accept length.
4. ``/server_info`` (``/get_server_info``), read after the smoke so its average includes it:
   ``version``, ``standin`` (the lab's stand-in says so), speculative settings and
   ``internal_states[0].avg_spec_accept_length`` (reported, not judged: SGLang refreshes it only at
   its decode-log intervals).
5. ``min_accept_length`` > 0: the server must be speculative, and the pooled accept length of a
   sample of requests (``_sglang_accept``) must reach the minimum; a sample too small to judge is
   reported and not gated. The sample is sent as the benchmark sends its requests, through the
   benchmark's own client: ``/v1/chat/completions`` for a chat model (``accept_api`` auto, decided
   as sglang_bench decides it), at ``accept_temperature`` (the benchmark's 1.0), ``ignore_eos``;
   ``accept_sample.request`` states the shape. The smoke (3.) stays greedy raw text: it only asks
   for a token.

Everything here only reads: a smoke generation changes nothing on the server, so check mode runs
the same checks.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable
from urllib import parse as _urlparse

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import accept as _accept
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import chat as _chat
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import client as _http
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import unit as _unit
from ansible_collections.gpufleet.llm.plugins.module_utils._common import systemd as _systemd
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure

JOURNAL_HINT = "journalctl -u sglang-<instance>.service"
STANDIN_NOTICE = ("the server is the lab's SGLang stand-in (standin: true in /server_info), not SGLang: its "
                  "accept length and timings are a model, and say nothing about GPUs")


class ProbeError(ModuleFailure):
    """A failed check; ``result`` holds what was learnt before it, and is what the module fails with."""

    def __init__(self, msg: str, result: dict[str, Any]) -> None:
        super(ProbeError, self).__init__(msg, **result)

    @property
    def result(self) -> dict[str, Any]:
        return self.fields


def argument_spec() -> dict[str, dict[str, Any]]:
    """sglang_probe's options, the one place their types and defaults are written."""
    return dict(
        url=dict(type="str", default=_http.DEFAULT_URL),
        api_key=dict(type="str", no_log=True),
        admin_api_key=dict(type="str", no_log=True),
        timeout=dict(type="float", default=3600),
        interval=dict(type="float", default=5),
        request_timeout=dict(type="float", default=300),
        expect_model_path=dict(type="path"),
        smoke=dict(type="bool", default=True),
        smoke_prompt=dict(type="str", default="The capital of France is"),
        smoke_max_new_tokens=dict(type="int", default=16, no_log=False),  # a token count, not a secret
        min_accept_length=dict(type="float", default=0),
        accept_requests=dict(type="int", default=8),
        accept_max_new_tokens=dict(type="int", default=256, no_log=False),  # a token count, not a secret
        accept_min_tokens=dict(type="int", default=1024, no_log=False),  # a token count, not a secret
        accept_api=dict(type="str", choices=list(_chat.APIS), default="auto"),
        accept_temperature=dict(type="float", default=_chat.DEFAULT_TEMPERATURE),
        unit=dict(type="str"),
        validate_certs=dict(type="bool", default=True),
        ca_path=dict(type="path"),
    )


def run(params: dict[str, Any], *, warn: Callable[[str], None],
        run_command: _systemd.RunCommand | None = None) -> dict[str, Any]:
    """probe() for the module: its notices go to ``warn`` (shown on failure too), not into the result."""
    try:
        result = probe(params, run_command=run_command)
    except ProbeError as exc:
        for notice in exc.result.pop("notices", []):
            warn(notice)
        raise
    for notice in result.pop("notices", []):
        warn(notice)
    return result


def _num(value):
    return ("%.3f" % value).rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def check_params(params):
    """Problems with the numbers, as messages (empty when fine)."""
    problems = []
    if params["timeout"] < 0:
        problems.append("timeout must be >= 0 seconds (got %s)" % _num(params["timeout"]))
    if params["interval"] <= 0:
        problems.append("interval must be > 0 seconds (got %s)" % _num(params["interval"]))
    if params["request_timeout"] <= 0:
        problems.append("request_timeout must be > 0 seconds (got %s)" % _num(params["request_timeout"]))
    if params["smoke_max_new_tokens"] < 1:
        problems.append("smoke_max_new_tokens must be >= 1 (got %s)" % params["smoke_max_new_tokens"])
    if params["min_accept_length"] < 0:
        problems.append("min_accept_length must be >= 0; 0 turns the check off (got %s)"
                        % _num(params["min_accept_length"]))
    for name in ("accept_requests", "accept_max_new_tokens"):
        if params[name] < 1:
            problems.append("%s must be >= 1 (got %s)" % (name, params[name]))
    if params["accept_temperature"] < 0:
        problems.append("accept_temperature must be >= 0 (got %s); keep the benchmark's (sglang_bench_temperature, "
                        "1.0) so that the gate measures what the benchmark measures" % _num(params["accept_temperature"]))
    if params["accept_min_tokens"] < 0:
        problems.append("accept_min_tokens must be >= 0 (got %s)" % params["accept_min_tokens"])
    if params.get("unit"):
        problem = _systemd.check_name(params["unit"])
        if problem:
            problems.append(problem)
    if params.get("ca_path") and not os.path.isfile(params["ca_path"]):
        problems.append("ca_path %s is not a file on this host" % params["ca_path"])
    return problems


def url_password(url):
    """The password part of a URL with credentials (to mask it), or None."""
    try:
        return _urlparse.urlsplit(url or "").password
    except ValueError:
        return None


def _auth_hint(api_key):
    if api_key:
        return "the api_key given is not the server's api-key (the api-key option in its config)"
    return "the server requires an API key: set api_key to the api-key in its config"


class _Client(object):
    def __init__(self, params):
        self.url = params["url"]
        self.kw = dict(api_key=params.get("api_key") or None, validate_certs=params["validate_certs"],
                       ca_path=params.get("ca_path") or None)
        self.timeout = params["request_timeout"]

    def get_json(self, paths, result):
        """GET the first of ``paths`` that is not 404; fail on anything but a JSON object with 200."""
        status, data, path = None, None, paths[0]
        for path in paths:
            status, data = self._call(path, "GET", None, result)
            if status != 404:
                break
        self._check_status(path, status, data, result)
        if not isinstance(data, dict):
            raise ProbeError("GET %s%s answered 200 without a JSON object (%r): is this an SGLang server?"
                             % (self.url, path, data), result)
        return path, data

    def _call(self, path, method, body, result):
        try:
            return _http.call(self.url, path, method=method, body=body, timeout=self.timeout, **self.kw)
        except _http.SGLangHTTPError as exc:
            raise ProbeError("%s; the server was healthy moments ago: see %s" % (exc.msg, JOURNAL_HINT), result)

    def _check_status(self, path, status, data, result):
        if status == 200:
            return
        detail = _http.error_text(data)
        detail = ": %s" % detail if detail else ""
        if status in (401, 403):
            raise ProbeError("%s%s answered %d (authentication failed%s): %s"
                             % (self.url, path, status, detail, _auth_hint(self.kw["api_key"])), result)
        raise ProbeError("%s%s answered %d%s; see %s" % (self.url, path, status, detail, JOURNAL_HINT), result)

    def post(self, path, body, result):
        status, data = self._call(path, "POST", body, result)
        self._check_status(path, status, data, result)
        if not isinstance(data, dict):
            raise ProbeError("POST %s%s answered 200 without a JSON object (%r)" % (self.url, path, data), result)
        return data


def _health_hint(exc, timeout):
    if exc.status is None and "refused" in exc.msg:
        return ("nothing listens at that address: is the service running (systemctl status "
                "sglang-<instance>.service) and is url its host:port? See %s" % JOURNAL_HINT)
    if exc.status == 503:
        return ("the server is still loading or never became ready after %ss: a large model takes many minutes "
                "(raise timeout), or it is stuck; see %s" % (_num(float(timeout)), JOURNAL_HINT))
    return "see %s" % JOURNAL_HINT


def _server_accept(info):
    """avg_spec_accept_length from /server_info, or None (SGLang 0.5.23 reports no cumulative counts)."""
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        avg = states[0].get("avg_spec_accept_length")
        return float(avg) if isinstance(avg, (int, float)) and not isinstance(avg, bool) else None
    return None


def _smoke(client, params, result):
    body = {"text": params["smoke_prompt"],
            "sampling_params": {"max_new_tokens": params["smoke_max_new_tokens"], "temperature": 0}}
    t0 = time.monotonic()
    data = client.post("/generate", body, result)
    latency = time.monotonic() - t0
    meta = data.get("meta_info") if isinstance(data.get("meta_info"), dict) else {}
    completion = meta.get("completion_tokens")
    verify = meta.get("spec_verify_ct")
    smoke = dict(completion_tokens=completion, spec_verify_ct=verify, latency=round(latency, 4),
                 accept_length=None, finish_reason=meta.get("finish_reason"))
    if isinstance(completion, int) and isinstance(verify, int) and verify > 0:
        smoke["accept_length"] = round(float(completion) / verify, 4)
    result["smoke"] = smoke
    if not isinstance(completion, int) or completion < 1:
        raise ProbeError("POST %s/generate (smoke, max_new_tokens %d) returned no tokens (completion_tokens %r): "
                         "the server answers but does not generate; see %s"
                         % (client.url, params["smoke_max_new_tokens"], completion, JOURNAL_HINT), result)
    return smoke


def _mark_standin(result):
    if not result["standin"]:
        result["standin"] = True
        result["notices"].append(STANDIN_NOTICE)


def _wait_healthy(params, client, result, watch):
    """Step 1: /health until 200, the unit (when given) read before every pause."""
    started = time.monotonic()
    try:
        if watch is not None:
            result["checks"].append(watch.summary(watch.check()))
        health = _http.wait_healthy(params["url"], timeout=params["timeout"], interval=params["interval"],
                                    request_timeout=min(params["request_timeout"], 30.0),
                                    sleep=watch.sleep if watch is not None else time.sleep, **client.kw)
        if watch is not None:
            # A restart between the last pause and the 200 counts too: the server that answers is not
            # the one the wait started with.
            watch.check()
    except _unit.UnitError as exc:
        result.update(polls=max(watch.looks - 1, 0), waited=round(time.monotonic() - started, 3), unit_failed=True)
        raise ProbeError("%s\nThe probe stopped waiting for %s/health after %ss (timeout %ss): a crashed unit "
                         "does not become ready; fix what the journal says" % (
                             exc.msg, params["url"], _num(result["waited"]), _num(float(params["timeout"]))),
                         result)
    except _http.SGLangHTTPError as exc:
        result.update(polls=exc.polls or 0, waited=exc.waited)
        if exc.status in (401, 403):
            raise ProbeError(exc.msg, result)
        raise ProbeError("%s; %s" % (exc.msg, _health_hint(exc, params["timeout"])), result)
    result.update(healthy=True, waited=health["waited"], polls=health["polls"])
    result["checks"].append("health: /health answered 200 after %ss (%d polls)"
                            % (_num(float(health["waited"])), health["polls"]))


def _defaults():
    return dict((name, spec.get("default")) for name, spec in argument_spec().items())


def probe(params, *, run_command=None):
    """Run the checks; returns the result dict, raises ProbeError (with the partial result).

    ``run_command(argv) -> (rc, stdout, stderr)`` runs systemctl and journalctl for ``unit``.
    """
    params = dict(_defaults(), **params)
    result = dict(changed=False, healthy=False, url=params.get("url"), waited=None, polls=0, model_path=None,
                  served_model_name=None, version=None, standin=False, speculative=None,
                  speculative_algorithm=None, accept_length=None, accept_sample=None, smoke=None,
                  min_accept_length=params["min_accept_length"], unit=params.get("unit"), unit_failed=False,
                  checks=[], notices=[])
    try:
        params = dict(params, url=_http.validate_base_url(params["url"]))
    except _http.SGLangHTTPError as exc:
        raise ProbeError(exc.msg, result)
    result["url"] = params["url"]
    problems = check_params(params)
    if params.get("unit") and run_command is None:
        problems.append("unit is given but there is no way to run systemctl here")
    if problems:
        raise ProbeError("; ".join(problems), result)
    client = _Client(params)
    watch = None
    if params.get("unit"):
        watch = _unit.UnitWatch(params["unit"], run_command, secrets=(params.get("api_key"), params.get("admin_api_key")))

    # 1. health
    _wait_healthy(params, client, result, watch)

    # 2. model
    path, info = client.get_json(["/model_info", "/get_model_info"], result)
    served = info.get("model_path")
    result["model_path"] = served
    result["served_model_name"] = info.get("served_model_name")
    if info.get("standin") is True:
        _mark_standin(result)
    expect = params.get("expect_model_path")
    if expect:
        if not isinstance(served, str) or not served:
            raise ProbeError("GET %s%s has no model_path (answer keys: %s); cannot check expect_model_path %s"
                             % (params["url"], path, ", ".join(sorted(info)) or "none", expect), result)
        if os.path.normpath(served) != os.path.normpath(expect):
            raise ProbeError(
                "GET %s%s: the server serves model_path %s, expected %s: the server answers for another model "
                "(its config names another model-path, or it was not restarted after the config changed); "
                "check model-path in /etc/sglang/<instance>.yaml and %s"
                % (params["url"], path, served, expect, JOURNAL_HINT), result)
        result["checks"].append("model: %s serves %s" % (path, served))

    # 3. smoke
    if params["smoke"]:
        smoke = _smoke(client, params, result)
        result["checks"].append("smoke: /generate returned %d tokens in %ss (spec_verify_ct %s)"
                                % (smoke["completion_tokens"], _num(smoke["latency"]), smoke["spec_verify_ct"]))

    # 4. server info
    path, sinfo = client.get_json(["/server_info", "/get_server_info"], result)
    result["version"] = sinfo.get("version")
    if sinfo.get("standin") is True:
        _mark_standin(result)
    algo = sinfo.get("speculative_algorithm")
    avg = _server_accept(sinfo)
    result.update(accept_length=avg, speculative_algorithm=algo if algo not in ("", "NONE") else None)
    result["speculative"] = bool(result["speculative_algorithm"]) or avg is not None

    # 5. accept length
    minimum = params["min_accept_length"]
    if minimum > 0:
        _check_accept(params, result, path, minimum, client=client, server=sinfo)
    return result


def _check_accept(params, result, path, minimum, *, client, server):
    if not result["speculative"]:
        raise ProbeError(
            "min_accept_length is %s but the server at %s is not speculative: %s%s has no speculative_algorithm "
            "and internal_states[0] has no avg_spec_accept_length, so there is no accept length to check; "
            "configure the drafter (speculative-algorithm, speculative-draft-model-path) or set "
            "min_accept_length 0 for an autoregressive server" % (_num(minimum), params["url"], params["url"], path),
            result)
    # The benchmark's choice of API (a chat model gets its chat template), on the server's own model
    # directory as /server_info names it (this module runs on the server's host).
    api, why = _chat.resolve_api(params["accept_api"], server)
    shape = dict(_accept.request_shape(api, params["accept_temperature"], params["accept_max_new_tokens"]),
                 reason=why)
    try:
        samples = _accept.collect(params["url"], requests=params["accept_requests"],
                                  max_new_tokens=params["accept_max_new_tokens"], api=api,
                                  temperature=params["accept_temperature"], client=client.kw,
                                  request_timeout=params["request_timeout"])
    except _accept.AcceptSampleError as exc:
        raise ProbeError("the accept-length sample (POST %s%s) failed: %s; see %s"
                         % (params["url"], shape["path"], exc, JOURNAL_HINT), result)
    sample = _accept.summarize(samples, max_new_tokens=params["accept_max_new_tokens"],
                               min_tokens=params["accept_min_tokens"])
    sample["request"] = shape
    result["accept_sample"] = sample
    _refresh_server_accept(client, result)
    measured = sample["accept_length"]
    ci95 = sample["ci95"]
    numbers = "sample of %d requests x %d new tokens (POST %s%s, %s, temperature %s, ignore_eos, as the benchmark " \
        "sends them): %d completion tokens / %s verify steps from %d requests reporting spec_verify_ct%s; server " \
        "avg_spec_accept_length %s" % (
            sample["requests"], sample["max_new_tokens"], params["url"], shape["path"],
            "chat template" if shape["chat_template"] else "raw text, %s" % why,
            _num(float(shape["temperature"])), sample["completion_tokens"],
            sample["spec_verify_ct"], sample["reporting"],
            ", 95%% interval %s-%s" % (_num(ci95[0]), _num(ci95[1])) if ci95 else "",
            _num(result["accept_length"]) if result["accept_length"] is not None else "absent")
    if not sample["judged"]:
        note = ("accept length %s not judged against min_accept_length %s: the sample is too small (%s; it takes "
                ">= 2 requests reporting spec_verify_ct and >= %d tokens, accept_min_tokens). Requests that stop "
                "early (a server that ignores ignore_eos) shrink it: raise accept_requests or accept_max_new_tokens"
                % (_num(measured) if measured is not None else "n/a", _num(minimum), numbers,
                   sample["min_tokens"]))
        result["notices"].append(note)
        result["checks"].append(note)
        return
    if measured < minimum:
        raise ProbeError(
            "accept length %s (pooled sample) is below min_accept_length %s: %s. The drafter does not fit the "
            "target well: check speculative-draft-model-path and that the drafter was trained for this target "
            "revision, or lower min_accept_length" % (_num(measured), _num(minimum), numbers), result)
    result["checks"].append("accept length: %s (pooled sample) >= %s; %s" % (_num(measured), _num(minimum), numbers))


def _refresh_server_accept(client, result):
    """Read the server's average again after the sample: SGLang folds it only every decode-log-interval
    decode iterations, so before the sample a freshly started server often has none to report."""
    _path, sinfo = client.get_json(["/server_info", "/get_server_info"], result)
    avg = _server_accept(sinfo)
    if avg is not None:
        result["accept_length"] = avg
