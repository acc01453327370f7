# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_probe module end to end, in-process, against the lab's SGLang STAND-IN on loopback
(tests/unit/plugins/standin.py) serving the tiny Kimi-shaped trees of model_trees.py. The stand-in
is not SGLang (no GPU here): its accept lengths come from its open delay/accept model, set here
through its GPUFLEET_STANDIN_* knobs, and say nothing about GPUs."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import chat as _sglang_chat
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import probe as _sglang_probe
from ansible_collections.gpufleet.llm.plugins.modules import sglang_probe
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils._sglang.test_sglang_unit import JOURNAL, SECRET, FakeSystemd
from ansible_collections.gpufleet.llm.tests.unit.plugins.modules.module_runner import run_module
from ansible_collections.gpufleet.llm.tests.unit.plugins.standin import (  # noqa: F401 pylint: disable=unused-import
    free_port, standin_factory)

API_KEY = "sk-lab-probe-fake-KEY-0123456789"  # lab-only, fake
WRONG_KEY = "sk-lab-probe-WRONG-key-987654321"  # lab-only, fake


def run(capsys, args, check_mode=False, forbidden=API_KEY):
    return run_module(sglang_probe.main, capsys, args, check_mode=check_mode, forbidden=forbidden)


def _paths(golden):
    return os.path.join(golden, "target"), os.path.join(golden, "drafter")


def test_healthy_speculative_server(capsys, standin_factory, golden):
    target, drafter = _paths(golden)
    server = standin_factory(target, drafter=drafter, wait="ready")
    # a trailing slash and a // are normalised away
    res = run(capsys, {"url": server.url + "/", "expect_model_path": target.replace("/target", "//target/"),
                       "interval": 0.2, "timeout": 30})
    assert res["_rc"] == 0, res.get("msg")
    assert res["changed"] is False and res["healthy"] is True
    assert res["url"] == server.url and res["model_path"] == target
    assert res["version"] == "0.5.23-standin"
    assert res["standin"] is True
    assert "SGLang stand-in" in json.dumps(res["warnings"])  # 2.19: structured warnings
    assert res["speculative"] is True and res["speculative_algorithm"] == "DFLASH"
    smoke = res["smoke"]
    assert smoke["completion_tokens"] == 16
    assert 1 <= smoke["spec_verify_ct"] <= 16
    assert smoke["accept_length"] == pytest.approx(16.0 / smoke["spec_verify_ct"], abs=1e-3)
    # SGLang 0.5.23 folds its server average only every decode-log-interval (40) decode iterations:
    # after one 16-token request there is none yet (issue 11 items 9 and 11; it used to be the smoke's ratio)
    assert res["accept_length"] is None
    assert res["accept_sample"] is None  # min_accept_length 0: no sample sent
    assert res["min_accept_length"] == 0
    assert len(res["checks"]) == 3  # health, model, smoke


def test_check_mode_runs_the_same_checks(capsys, standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, wait="ready")
    res = run(capsys, {"url": server.url, "expect_model_path": target}, check_mode=True)
    assert res["_rc"] == 0, res.get("msg")
    assert res["changed"] is False and res["smoke"]["completion_tokens"] == 16
    assert res["speculative"] is False and res["accept_length"] is None
    # autoregressive: SGLang 0.5.23 puts no spec_* figures in meta_info (the stand-in used to say 16 steps)
    assert res["smoke"]["spec_verify_ct"] is None and res["smoke"]["accept_length"] is None
    res = run(capsys, {"url": server.url, "expect_model_path": "/srv/other"}, check_mode=True)
    assert res["_rc"] == 1 and "expected /srv/other" in res["msg"]


def test_waits_through_loading_503(capsys, standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, env={"GPUFLEET_STANDIN_LOAD_SECONDS": "3"}, wait="answering")
    res = run(capsys, {"url": server.url, "expect_model_path": target, "interval": 0.2, "timeout": 60})
    assert res["_rc"] == 0, res.get("msg")
    assert res["polls"] >= 2 and res["waited"] > 0


def test_never_ready_times_out(capsys, standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, env={"GPUFLEET_STANDIN_NEVER_READY": "1"}, wait="answering")
    res = run(capsys, {"url": server.url, "expect_model_path": target, "interval": 0.2, "timeout": 1})
    assert res["_rc"] == 1 and res["failed"] is True
    assert res["healthy"] is False and res["polls"] >= 2
    msg = res["msg"]
    assert "/health did not answer 200 within 1s" in msg and "last answer: 503" in msg
    assert "raise timeout" in msg and "journalctl -u sglang-" in msg


def test_wrong_model_path(capsys, standin_factory, golden):
    target, drafter = _paths(golden)
    server = standin_factory(target, wait="ready")
    res = run(capsys, {"url": server.url, "expect_model_path": drafter})
    assert res["_rc"] == 1
    assert res["model_path"] == target and res["healthy"] is True
    msg = res["msg"]
    assert "/model_info" in msg and "serves model_path %s, expected %s" % (target, drafter) in msg
    assert "another model" in msg and "journalctl" in msg
    assert res["smoke"] is None  # stopped at the failed check


def test_api_key(capsys, standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, api_key=API_KEY, wait="ready")
    res = run(capsys, {"url": server.url, "expect_model_path": target})
    assert res["_rc"] == 1 and "401" in res["msg"] and "authentication" in res["msg"]
    assert "set api_key" in res["msg"] and "/model_info" in res["msg"]
    res = run(capsys, {"url": server.url, "expect_model_path": target, "api_key": WRONG_KEY}, forbidden=WRONG_KEY)
    assert res["_rc"] == 1 and "401" in res["msg"] and "not the server's api-key" in res["msg"]
    res = run(capsys, {"url": server.url, "expect_model_path": target, "api_key": API_KEY})
    assert res["_rc"] == 0, res.get("msg")
    assert res["smoke"]["completion_tokens"] == 16
    # the stand-in logs it itself, as SGLang 0.5.23 does (`server_args=` at INFO); nowhere else
    assert [line for line in server.log().splitlines() if API_KEY in line and "server_args=" not in line] == []


def test_accept_length_below_minimum_fails(capsys, standin_factory, golden):
    target, drafter = _paths(golden)
    # accept mean 1: p = 0, every verify step emits exactly one token, accept length exactly 1.0
    server = standin_factory(target, drafter=drafter, env={"GPUFLEET_STANDIN_ACCEPT_MEAN": "1"}, wait="ready")
    res = run(capsys, {"url": server.url, "expect_model_path": target, "min_accept_length": 1.5})
    assert res["_rc"] == 1, res
    assert res["smoke"]["spec_verify_ct"] == 16 and res["smoke"]["accept_length"] == pytest.approx(1.0)
    # judged on the pooled sample (8 x 256 tokens by default), not on one 16-token request (issue 11 item 9)
    sample = res["accept_sample"]
    assert sample["requests"] == 8 and sample["reporting"] == 8 and sample["judged"] is True
    assert sample["completion_tokens"] == 2048 and sample["spec_verify_ct"] == 2048
    assert sample["accept_length"] == 1.0 and sample["ci95"] == [1.0, 1.0]
    msg = res["msg"]
    assert "accept length 1 (pooled sample) is below min_accept_length 1.5" in msg
    assert "sample of 8 requests x 256 new tokens" in msg and "2048 completion tokens / 2048 verify steps" in msg
    # the golden target has no chat template: raw text to /generate, as the benchmark would send it
    assert "/generate, raw text, no chat template:" in msg and "temperature 1, ignore_eos, as the benchmark" in msg


def test_accept_length_above_minimum_passes(capsys, standin_factory, golden):
    target, drafter = _paths(golden)
    # accept mean = block (4 draft tokens): p = 1, every step emits 4 tokens, accept length exactly 4.0
    server = standin_factory(target, drafter=drafter, options={"speculative-num-draft-tokens": 4},
                             env={"GPUFLEET_STANDIN_ACCEPT_MEAN": "4"}, wait="ready")
    res = run(capsys, {"url": server.url, "expect_model_path": target, "min_accept_length": 3.5})
    assert res["_rc"] == 0, res.get("msg")
    assert res["accept_sample"]["accept_length"] == pytest.approx(4.0)
    assert res["accept_sample"]["spec_verify_ct"] == 512 and res["accept_sample"]["judged"] is True
    # the server's average, read again after the sample (64 decode iterations > decode-log-interval 40)
    assert res["accept_length"] == pytest.approx(4.0)
    assert res["smoke"]["spec_verify_ct"] == 4 and res["smoke"]["accept_length"] == pytest.approx(4.0)
    assert any(c.startswith("accept length: 4 (pooled sample) >= 3.5") for c in res["checks"])


def _chat_target(golden, tmp_path):
    """The golden target with a chat template, as Kimi K2.6 ships one (chat_template.jinja)."""
    target = str(tmp_path / "chat-target")
    shutil.copytree(os.path.join(golden, "target"), target)
    with open(os.path.join(target, "chat_template.jinja"), "w") as handle:
        handle.write("{% for m in messages %}<|im_{{ m.role }}|>{{ m.content }}<|im_end|>{% endfor %}")
    return target


def test_accept_sample_is_sent_as_the_benchmark_sends(capsys, standin_factory, golden, tmp_path, monkeypatch):
    # Issue 24 item 3: the gate measured greedy raw-text /generate prompts while the benchmark sends a chat
    # model's requests through /v1/chat/completions (its chat template) at temperature 1.0: the gate judged
    # another distribution. Now the sample goes through the benchmark's own client and bodies.
    target = _chat_target(golden, tmp_path)
    _t, drafter = _paths(golden)
    server = standin_factory(target, drafter=drafter, options={"log-level": "debug"}, wait="ready")
    bodies = []
    real_chat_body = _sglang_chat.chat_body

    def recording_chat_body(request, temperature):
        body = real_chat_body(request, temperature)
        bodies.append(body)
        return body

    monkeypatch.setattr(_sglang_chat, "chat_body", recording_chat_body)
    res = run(capsys, {"url": server.url, "expect_model_path": target, "min_accept_length": 1.0})
    assert res["_rc"] == 0, res.get("msg")
    sample = res["accept_sample"]
    assert sample["request"] == dict(api="chat", path="/v1/chat/completions", chat_template=True, temperature=1.0,
                                     ignore_eos=True, stream=True, max_new_tokens=256,
                                     reason="chat model: %s/chat_template.jinja exists" % target)
    assert sample["requests"] == 8 and sample["reporting"] == 8 and sample["completion_tokens"] == 2048
    assert sample["judged"] is True and sample["accept_length"] > 1.0
    # what went over the wire: the benchmark's chat bodies (chat template applied by the server), temperature 1.0
    sent = [b for b in bodies if b["messages"][0]["content"]]  # request_shape() reads one empty body too
    assert len(sent) == 8 and len({b["messages"][0]["content"] for b in sent}) == 8
    assert all(b["messages"][0]["role"] == "user" and b["temperature"] == 1.0 and b["ignore_eos"] is True
               and b["max_tokens"] == 256 and b["stream"] is True and b["return_spec_tokens_details"] is True
               for b in bodies)
    log = server.log()
    assert log.count('"POST /v1/chat/completions HTTP/1.1" 200') == 8
    assert log.count('"POST /generate HTTP/1.1" 200') == 1  # the smoke only
    check = [c for c in res["checks"] if c.startswith("accept length:")][0]
    assert "/v1/chat/completions, chat template, temperature 1, ignore_eos, as the benchmark sends them" in check


def test_accept_sample_follows_the_benchmarks_temperature_and_api(capsys, standin_factory, golden, tmp_path):
    target = _chat_target(golden, tmp_path)
    _t, drafter = _paths(golden)
    server = standin_factory(target, drafter=drafter, options={"log-level": "debug"}, wait="ready")
    res = run(capsys, {"url": server.url, "min_accept_length": 1.0, "accept_api": "generate",
                       "accept_temperature": 0.7, "accept_requests": 4})
    assert res["_rc"] == 0, res.get("msg")
    request = res["accept_sample"]["request"]
    assert (request["api"], request["path"], request["temperature"], request["chat_template"]) == (
        "generate", "/generate", 0.7, False)
    assert request["reason"] == "api=generate was asked for"
    assert server.log().count('"POST /generate HTTP/1.1" 200') == 1 + 4
    assert '"POST /v1/chat/completions' not in server.log()


def test_a_failed_sample_request_fails_the_probe(capsys, standin_factory, golden):
    target, drafter = _paths(golden)
    # 200 tokens at 50 ms per verify step take seconds; the benchmark's client bounds a whole request by
    # request_timeout, so each sample request fails (the health and info reads are quick)
    server = standin_factory(target, drafter=drafter, wait="ready", env={"GPUFLEET_STANDIN_STEP_MS": "50",
                                                                         "GPUFLEET_STANDIN_ACCEPT_MEAN": "1"})
    res = run(capsys, {"url": server.url, "min_accept_length": 1.0, "request_timeout": 0.5, "smoke": False,
                       "accept_requests": 2, "accept_max_new_tokens": 200})
    assert res["_rc"] == 1
    assert "the accept-length sample (POST %s/generate) failed" % server.url in res["msg"]
    assert "2 of 2 sample requests failed" in res["msg"] and "longer than request_timeout (0.5s)" in res["msg"]
    assert res["accept_sample"] is None


def test_a_sample_too_small_is_reported_not_judged(capsys, standin_factory, golden):
    target, drafter = _paths(golden)
    server = standin_factory(target, drafter=drafter, env={"GPUFLEET_STANDIN_ACCEPT_MEAN": "1"}, wait="ready")
    # 2 x 16 tokens < accept_min_tokens: a minimum it would miss by far is not applied, and it says so
    res = run(capsys, {"url": server.url, "min_accept_length": 3.0, "accept_requests": 2,
                       "accept_max_new_tokens": 16, "accept_min_tokens": 1024})
    assert res["_rc"] == 0, res.get("msg")
    sample = res["accept_sample"]
    assert sample["judged"] is False and sample["completion_tokens"] == 32 and sample["accept_length"] == 1.0
    assert "sample is too small" in json.dumps(res["warnings"])
    assert any("not judged against min_accept_length 3" in c for c in res["checks"])


def test_min_accept_length_on_autoregressive_server_fails(capsys, standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, wait="ready")
    res = run(capsys, {"url": server.url, "min_accept_length": 1.0})
    assert res["_rc"] == 1
    assert res["speculative"] is False
    assert "is not speculative" in res["msg"] and "min_accept_length 0" in res["msg"]


def test_no_smoke(capsys, standin_factory, golden):
    target, drafter = _paths(golden)
    server = standin_factory(target, drafter=drafter, wait="ready")
    res = run(capsys, {"url": server.url, "smoke": False})
    assert res["_rc"] == 0, res.get("msg")
    assert res["smoke"] is None and len(res["checks"]) == 1  # health only (no expect_model_path)


def test_connection_refused(capsys):
    url = "http://127.0.0.1:%d" % free_port()
    res = run(capsys, {"url": url, "timeout": 0.5, "interval": 0.2, "api_key": API_KEY})
    assert res["_rc"] == 1 and res["healthy"] is False
    assert "GET %s/health" % url in res["msg"] and "connection refused" in res["msg"]
    assert "systemctl status sglang-" in res["msg"]


@pytest.mark.parametrize("args,fragment", [
    ({"url": "ftp://127.0.0.1:30000"}, "scheme must be http or https"),
    ({"url": "http://admin:hunter2@127.0.0.1:30000"}, "must not contain credentials"),
    ({"url": "127.0.0.1:30000"}, "scheme must be http or https"),
    ({"interval": 0}, "interval must be > 0"),
    ({"timeout": -1}, "timeout must be >= 0"),
    ({"smoke_max_new_tokens": 0}, "smoke_max_new_tokens must be >= 1"),
    ({"min_accept_length": -1}, "min_accept_length must be >= 0"),
    ({"accept_requests": 0}, "accept_requests must be >= 1"),
    ({"accept_max_new_tokens": 0}, "accept_max_new_tokens must be >= 1"),
    ({"accept_min_tokens": -1}, "accept_min_tokens must be >= 0"),
    ({"accept_temperature": -0.5}, "accept_temperature must be >= 0"),
    ({"unit": "sglang; reboot"}, "is not a systemd unit name"),
])
def test_bad_input(capsys, args, fragment):
    res = run(capsys, args, forbidden="hunter2")
    assert res["_rc"] == 1 and fragment in res["msg"]
    assert res["polls"] == 0


def test_probe_error_keeps_partial_result():
    with pytest.raises(_sglang_probe.ProbeError) as exc:
        _sglang_probe.probe(dict(url="http://127.0.0.1:%d" % free_port(), api_key=None, timeout=0, interval=1,
                                 request_timeout=5, expect_model_path=None, smoke=True,
                                 smoke_prompt="x", smoke_max_new_tokens=1, min_accept_length=0,
                                 validate_certs=True, ca_path=None))
    assert exc.value.result["healthy"] is False and exc.value.result["changed"] is False
    assert "(1 polls every 1s)" in exc.value.msg


def _params(**given):
    """sglang_probe's params as AnsibleModule builds them: every option, defaults from argument_spec()."""
    params = dict((name, spec.get("default")) for name, spec in _sglang_probe.argument_spec().items())
    params.update(given)
    return params


def test_run_warns_notices_on_failure_too(standin_factory, golden):
    target, drafter = _paths(golden)
    server = standin_factory(target, wait="ready")
    warnings = []
    with pytest.raises(_sglang_probe.ProbeError) as exc:
        _sglang_probe.run(_params(url=server.url, expect_model_path=drafter), warn=warnings.append)
    assert warnings == [_sglang_probe.STANDIN_NOTICE]
    fields = exc.value.fail_kwargs()
    assert "notices" not in fields and fields["model_path"] == target and fields["standin"] is True
    assert fields["msg"] == exc.value.msg and "expected %s" % drafter in fields["msg"]


# The unit watch (issue 11 item 3). Only systemctl/journalctl output is mocked (FakeSystemd replays
# `systemctl show` outputs recorded on a lab host, see test_sglang_unit.py); the server is the stand-in.

def test_a_crashed_unit_stops_the_wait_at_once(standin_factory, golden):
    target, _drafter = _paths(golden)
    # /health never answers 200, as a server whose process keeps dying before it listens
    server = standin_factory(target, env={"GPUFLEET_STANDIN_NEVER_READY": "1"}, wait="answering")
    fake = FakeSystemd(["crash-first-running", "crash-first-running", "crash-auto-restart"],
                       journal=JOURNAL.replace(SECRET, API_KEY))
    warnings = []
    with pytest.raises(_sglang_probe.ProbeError) as exc:
        _sglang_probe.run(_params(url=server.url, unit="sglang-itest.service", interval=0.2, timeout=600,
                                  api_key=API_KEY),
                          warn=warnings.append, run_command=fake)
    fields = exc.value.fail_kwargs()
    # stopped at the third look at the unit (2 polls), not at the timeout
    assert fields["unit_failed"] is True and fields["healthy"] is False and fields["polls"] == 2
    assert fields["waited"] < 600
    msg = fields["msg"]
    assert "sglang-itest.service crashed" in msg and "SubState=auto-restart" in msg
    assert "exited with status 1" in msg and "port taken" in msg  # the journal
    assert "stopped waiting for %s/health" % server.url in msg and "(timeout 600s)" in msg
    assert API_KEY not in msg and "api-key ********" in msg


def test_a_restart_between_the_last_poll_and_the_200_fails(standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, wait="ready")
    fake = FakeSystemd(["crash-first-running", "crash-second-running"])
    with pytest.raises(_sglang_probe.ProbeError) as exc:
        _sglang_probe.run(_params(url=server.url, unit="sglang-itest.service"), warn=lambda m: None,
                          run_command=fake)
    assert "NRestarts 0 -> 1" in exc.value.msg and exc.value.result["unit_failed"] is True


def test_module_watches_a_healthy_unit(capsys, monkeypatch, standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, wait="ready")
    fake = FakeSystemd(["running"])
    monkeypatch.setattr(sglang_probe.AnsibleModule, "run_command", lambda self, argv, **kw: fake(argv))
    monkeypatch.setattr(sglang_probe.AnsibleModule, "get_bin_path", lambda self, name, *a, **kw: "/usr/bin/" + name)
    res = run(capsys, {"url": server.url, "unit": "sglang-itest.service", "expect_model_path": target})
    assert res["_rc"] == 0, res.get("msg")
    assert res["unit"] == "sglang-itest.service" and res["unit_failed"] is False
    assert res["checks"][0] == "unit: sglang-itest.service active/running, NRestarts 0, main PID 79"
    assert [c[:2] for c in fake.calls] == [["systemctl", "show"]] * 2  # the first look and the one after the 200


def test_module_without_systemctl(capsys, monkeypatch):
    monkeypatch.setattr(sglang_probe.AnsibleModule, "get_bin_path", lambda self, name, *a, **kw: None)
    res = run(capsys, {"unit": "sglang-itest.service"})
    assert res["_rc"] == 1 and "systemctl is not on this host" in res["msg"]
