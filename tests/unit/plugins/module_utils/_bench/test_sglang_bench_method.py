# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark method (issue 11 item 10): warm-up and /flush_cache before every measured repeat
of every level, chat prompts for chat models, the temperature, repeats with a confidence interval
on the speedup, per-request accept lengths (never SGLang's lifetime average), and
sglang.benchmark.serving preferred over the deprecated sglang.bench_serving.

Against a SCRIPTED server (sglang_scripted.py: recorded SGLang 0.5.23 answer shapes, a request
log, no timing), so the order of what the benchmark sends is checked by events, not by the clock.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._bench import bench
from ansible_collections.gpufleet.llm.plugins.module_utils._bench import run as bench_run
from ansible_collections.gpufleet.llm.plugins.module_utils._bench import serving as bench_serving
from ansible_collections.gpufleet.llm.plugins.module_utils._bench import stats
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import chat
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import load
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.sglang_scripted import ScriptedServer
from ansible_collections.gpufleet.llm.tests.unit.plugins.standin import (  # noqa: F401 pylint: disable=unused-import
    standin_factory)


@pytest.fixture
def scripted():
    servers = []

    def start(**kwargs):
        servers.append(ScriptedServer(**kwargs))
        return servers[-1]
    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(dict(prompt="prompt %d" % i, category="chat")) for i in range(3)) + "\n")
    return str(path)


def _params(**given):
    params = dict((name, spec.get("default")) for name, spec in bench.argument_spec().items())
    params.update(given)
    return params


def _run(params, warnings=None):
    return bench_run.run(params, check_mode=False, run_command=None,
                         warn=(warnings.append if warnings is not None else lambda msg: None))


def _chat_model(tmp_path, how):
    model = tmp_path / "model"
    model.mkdir()
    if how == "jinja":
        (model / "chat_template.jinja").write_text("{{ messages }}")
    elif how == "config":
        (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    else:
        (model / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 4096}))
    return str(model)


# --- warm-up and flush ------------------------------------------------------------------------------

def test_each_level_warms_up_then_flushes_before_every_repeat(scripted, prompts):
    server = scripted()
    res = _run(_params(url=server.url, prompts=prompts, concurrency=[1, 2], num_requests=2, repeats=2,
                       max_new_tokens=12, api="generate"))
    paths = server.paths()
    # /server_info first; per level: 1 or 2 warm-up requests (one per slot), then per repeat a flush
    # and the 2 measured requests, then /server_info
    level = ["/flush_cache", "/generate", "/generate"] * 2 + ["/server_info"]
    assert paths == ["/server_info"] + ["/generate"] + level + ["/generate"] * 2 + level
    assert [len(lvl["repeats"]) for lvl in res["levels"]] == [2, 2]
    assert [r["repeat"] for r in res["records"]] == [0, 0, 1, 1] * 2  # warm-up requests are not records
    assert all(lvl["requests"] == 4 for lvl in res["levels"])


def test_warmup_and_flush_can_be_turned_off(scripted, prompts):
    server = scripted()
    _run(_params(url=server.url, prompts=prompts, concurrency=[2], num_requests=2, repeats=1, warmup_requests=0,
                 flush_cache=False, api="generate"))
    assert server.paths() == ["/server_info", "/generate", "/generate", "/server_info"]


def test_flush_refused_fails_and_missing_route_warns(scripted, prompts):
    busy = scripted(flush_status=400)
    with pytest.raises(ModuleFailure) as exc:
        _run(_params(url=busy.url, prompts=prompts, concurrency=[1], num_requests=1, repeats=1, api="generate"))
    assert "did not flush its cache" in exc.value.msg and "something else sending requests" in exc.value.msg
    old = scripted(flush_status=404)
    warnings = []
    _run(_params(url=old.url, prompts=prompts, concurrency=[1], num_requests=1, repeats=1, api="generate"), warnings)
    assert any("no POST /flush_cache" in w for w in warnings)


# --- temperature, chat ----------------------------------------------------------------------------------

def test_temperature_reaches_every_request(scripted, prompts):
    server = scripted()
    res = _run(_params(url=server.url, prompts=prompts, concurrency=[1], num_requests=2, repeats=1,
                       temperature=0.6, api="generate"))
    bodies = [body for _m, path, body in server.log if path == "/generate"]
    assert bodies and all(b["sampling_params"]["temperature"] == 0.6 for b in bodies)
    assert all(b["sampling_params"]["ignore_eos"] is True for b in bodies)
    assert res["workload"]["temperature"] == 0.6
    # the default is the model card's recommendation, not greedy decoding
    assert bench.argument_spec()["temperature"]["default"] == chat.DEFAULT_TEMPERATURE == 1.0


@pytest.mark.parametrize("how", ["jinja", "config"])
def test_chat_model_gets_chat_completions_by_default(scripted, prompts, tmp_path, how):
    server = scripted(model_path=_chat_model(tmp_path, how), tokens=12, steps=4)
    res = _run(_params(url=server.url, prompts=prompts, concurrency=[1], num_requests=2, repeats=1))
    assert res["workload"]["api"] == "chat" and "chat model" in res["workload"]["api_reason"]
    assert "/generate" not in server.paths()
    bodies = [body for _m, path, body in server.log if path == "/v1/chat/completions"]
    assert bodies[0]["messages"] == [{"role": "user", "content": "prompt 0"}]
    assert bodies[0]["return_spec_tokens_details"] is True and bodies[0]["stream_options"] == {"include_usage": True}
    assert bodies[0]["temperature"] == 1.0 and bodies[0]["max_tokens"] == 256
    level = res["levels"][0]
    # per-request accept length from the request's own sglext spec_tokens_details, not /server_info's 9.99
    assert level["accept_length"] == pytest.approx(3.0) and level["server_accept_length"] == 9.99
    assert all(r["api"] == "chat" and r["output_tokens"] == 12 and r["spec_verify_ct"] == 4 for r in res["records"])
    assert all(r["finish_reason"] == "length" for r in res["records"])


def test_model_without_chat_template_gets_generate(scripted, prompts, tmp_path):
    server = scripted(model_path=_chat_model(tmp_path, "plain"))
    res = _run(_params(url=server.url, prompts=prompts, concurrency=[1], num_requests=1, repeats=1))
    assert res["workload"]["api"] == "generate" and "no chat_template" in res["workload"]["api_reason"]
    unreadable = scripted(model_path=str(tmp_path / "absent"))
    res = _run(_params(url=unreadable.url, prompts=prompts, concurrency=[1], num_requests=1, repeats=1))
    assert res["workload"]["api"] == "generate" and "not readable" in res["workload"]["api_reason"]
    forced = scripted(model_path=str(tmp_path / "absent"))
    res = _run(_params(url=forced.url, prompts=prompts, concurrency=[1], num_requests=1, repeats=1, api="chat"))
    assert res["workload"]["api"] == "chat" and "/v1/chat/completions" in forced.paths()


def test_chat_template_source():
    assert chat.chat_template_source(None)[0] is None
    assert chat.resolve_api("generate", {"model_path": "/x"}) == ("generate", "api=generate was asked for")


# --- repeats and the interval -----------------------------------------------------------------------------

def test_t_quantiles_match_the_tables():
    for df, value in ((1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042)):
        assert stats.t_quantile(0.975, df) == pytest.approx(value, abs=1e-3)
    assert stats.t_cdf(0.0, 3) == pytest.approx(0.5)


def test_speedup_interval_is_welch_t_on_log_throughput():
    spec, base = [300.0, 310.0, 305.0], [100.0, 102.0, 98.0]
    out = stats.speedup_interval(spec, base)
    assert out["method"] == "welch-t-log-ratio" and out["confidence"] == 0.95
    assert out["low"] < out["ratio"] < out["high"]
    assert out["ratio"] == pytest.approx((300 * 310 * 305) ** (1 / 3.0) / (100 * 102 * 98) ** (1 / 3.0))
    assert 3.5 < out["df"] < 4.0  # Welch-Satterthwaite, between 2 and 4
    wider = stats.speedup_interval([250.0, 350.0, 305.0], base)
    assert wider["high"] - wider["low"] > out["high"] - out["low"]
    one = stats.speedup_interval([300.0], base)
    assert one["ratio"] and one["low"] is None and one["high"] is None


def test_speedup_carries_the_interval_from_the_repeats():
    spec = [dict(concurrency=4, output_throughput=305.0, latency_s=dict(p50=1.0),
                 repeats=[dict(output_throughput=v) for v in (300.0, 310.0, 305.0)])]
    base = [dict(concurrency=4, output_throughput=100.0, latency_s=dict(p50=3.0),
                 repeats=[dict(output_throughput=v) for v in (100.0, 102.0, 98.0)])]
    item = bench.speedup(spec, base)[0]
    expected = stats.speedup_interval([300.0, 310.0, 305.0], [100.0, 102.0, 98.0])
    assert (item["speedup_ci_low"], item["speedup_ci_high"]) == (expected["low"], expected["high"])
    assert (item["repeats_spec"], item["repeats_baseline"]) == (3, 3)


# --- bench_serving: module choice, warm-up/flush flags, per-request accept lengths --------------------------

PARAMS = dict(max_new_tokens=8, temperature=0.7, api="generate", warmup_requests=None, flush_cache=True,
              concurrency=[2], repeats=2, api_key=None, label="spec")
FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "sglang_bench_serving_result.jsonl")


def _fake(calls, module, side=None):
    def run_command(argv, cwd=None, environ_update=None):
        calls.append(argv)
        if argv[1] == "-c" and argv[2] == bench_serving.PROBE_SNIPPET:
            return 0, module + "\n", ""
        if argv[1] == "-c" and side is not None:
            with open(argv[3], "w") as handle:
                json.dump(side, handle)
        with open(FIXTURE) as src, open(argv[argv.index("--output-file") + 1], "a") as out:
            out.write(src.read())
        return 0, "", ""
    return run_command


def test_bench_serving_prefers_the_new_module_with_the_driver():
    raw = json.loads(open(FIXTURE).read().strip().splitlines()[-1])
    side = [dict(success=True, output_len=n, spec_accept_length=2.0 + (i % 2)) for i, n in enumerate(raw["output_lens"])]
    calls = []
    requests = load.build_requests([dict(prompt="hi", category="chat")], 4, 8)
    levels, records = bench_serving.run_levels("/py", "http://h:1", requests, params=PARAMS, server={},
                                               run_command=_fake(calls, "sglang.benchmark.serving", side))
    runs = [argv for argv in calls if "--output-file" in argv]
    assert len(runs) == 2  # repeats
    for argv in runs:
        assert argv[:3] == ["/py", "-c", bench_serving.DRIVER]
        assert argv[argv.index("--warmup-requests") + 1] == "2" and "--flush-cache" in argv
        # /generate reads the temperature from --temperature (sampling_params); an extra body would be dropped
        assert argv[argv.index("--temperature") + 1] == "0.7" and "--extra-request-body" not in argv
        assert argv[argv.index("--backend") + 1] == "sglang"
    level = levels[0]
    tokens = sum(raw["output_lens"]) * 2
    steps = sum(int(round(n / (2.0 + (i % 2)))) for i, n in enumerate(raw["output_lens"])) * 2
    assert level["accept_length"] == pytest.approx(tokens / float(steps))
    assert level["accept_length_source"] == "requests" and level["server_accept_length"] == raw["accept_length"]
    assert len(level["repeats"]) == 2 and {r["repeat"] for r in records} == {0, 1}
    assert records[1]["accept_length"] == 3.0


def test_bench_serving_falls_back_to_the_deprecated_module_and_chat_backend():
    calls = []
    requests = load.build_requests([dict(prompt="hi", category="chat")], 4, 8)
    levels, _records = bench_serving.run_levels("/py", "http://h:1", requests,
                                                params=dict(PARAMS, api="chat", repeats=1, flush_cache=False,
                                                            warmup_requests=0),
                                                server={}, run_command=_fake(calls, "sglang.bench_serving"))
    argv = calls[-1]
    assert argv[:3] == ["/py", "-m", "sglang.bench_serving"]
    assert argv[argv.index("--backend") + 1] == "sglang-oai-chat" and "--flush-cache" not in argv
    assert argv[argv.index("--warmup-requests") + 1] == "0"
    # the chat backend ignores --temperature and sends 0.0 unless the extra body names one
    assert json.loads(argv[argv.index("--extra-request-body") + 1]) == {"temperature": PARAMS["temperature"]}
    # no per-request figures from the old module: no accept length rather than the lifetime one
    assert levels[0]["accept_length"] is None and levels[0]["server_accept_length"] is not None


FAKE_SERVING = textwrap.dedent('''\
    """A FAKE sglang.benchmark.serving: cli_main() calls calculate_metrics(outputs=...) as 0.5.23 does."""
    import sys

    class Out:
        def __init__(self, n, acc):
            self.success, self.output_len, self.spec_accept_length = True, n, acc

    def calculate_metrics(input_requests=None, outputs=None, dur_s=0.0, tokenizer=None, backend="sglang"):
        return len(outputs)

    def cli_main():
        assert sys.argv[1:] == ["--backend", "sglang"], sys.argv
        print("metrics", calculate_metrics(input_requests=None, outputs=[Out(10, 2.5), Out(12, 3.0)], dur_s=1.0))
''')


def test_driver_saves_the_per_request_accept_lengths(tmp_path):
    """DRIVER runs the tool's own cli_main with calculate_metrics wrapped (a fake sglang here)."""
    pkg = tmp_path / "site" / "sglang" / "benchmark"
    pkg.mkdir(parents=True)
    (tmp_path / "site" / "sglang" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "serving.py").write_text(FAKE_SERVING)
    side = tmp_path / "side.json"
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    out = subprocess.run([sys.executable, "-c", bench_serving.DRIVER, str(side), "--backend", "sglang"], env=env,
                         cwd=str(tmp_path), capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "metrics 2" in out.stdout
    assert json.loads(side.read_text()) == [dict(success=True, output_len=10, spec_accept_length=2.5),
                                            dict(success=True, output_len=12, spec_accept_length=3.0)]


# --- the same against the lab's stand-in (its chat and flush answers follow SGLang 0.5.23) -----------------

def test_chat_and_flush_against_the_standin(standin_factory, golden, prompts):
    """The stand-in models timing, not GPUs: what is checked is that the method's requests (flush with
    its timeout, chat with return_spec_tokens_details and include_usage) are understood end to end."""
    target, drafter = os.path.join(golden, "target"), os.path.join(golden, "drafter")
    server = standin_factory(target, drafter=drafter, wait="ready", env={"GPUFLEET_STANDIN_ACCEPT_MEAN": "3.5"})
    warnings = []
    res = _run(_params(url=server.url, prompts=prompts, concurrency=[2], num_requests=4, repeats=2,
                       max_new_tokens=16, api="chat"), warnings)
    assert not [w for w in warnings if "flush" in w], warnings
    level = res["levels"][0]
    assert level["succeeded"] == 8 and level["output_tokens"] == 8 * 16 and len(level["repeats"]) == 2
    assert all(r["api"] == "chat" and r["spec_verify_ct"] for r in res["records"])
    assert level["accept_length"] > 1.0 and level["accept_length_source"] == "requests"
