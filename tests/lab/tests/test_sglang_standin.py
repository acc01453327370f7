"""The lab's SGLang STAND-IN (tests/lab/sglang_standin/gpufleet_lab_sglang.py), on loopback.

The stand-in is NOT SGLang: it models, openly, what the sglang role, sglang_probe and sglang_bench
rely on (config handling, cache dirs, a loader that opens every shard, /health, /generate, the
accept/delay model). Nothing here measures GPU performance, and no assertion is timed: deadlines
only keep a broken server from hanging the run.

Models: the lab fixture target (v1.0) and DFlash drafter, written from tests/lab/fixtures.py's
generator into a temporary directory.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

LAB_DIR = Path(__file__).resolve().parents[1]
STANDIN = LAB_DIR / "sglang_standin" / "gpufleet_lab_sglang.py"
sys.path.insert(0, str(STANDIN.parent))
import gpufleet_lab_sglang as standin  # noqa: E402

import fixtures  # noqa: E402  (tests/lab on sys.path via conftest)
import ready  # noqa: E402

START_DEADLINE = 60.0  # seconds: loading the fixtures takes well under 2 s here
EXIT_DEADLINE = 30.0
HTTP_TIMEOUT = 30.0
DRAFTER_BLOCK = fixtures.drafter_config()["block_size"]


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("standin-models")
    out = {}
    for name, files in (("target", fixtures.target_files(1, "Kimi-K2.6-mini", gated=False)),
                        ("drafter", fixtures.drafter_files())):
        d = root / name
        d.mkdir()
        for rel, data in files.items():
            (d / rel).write_bytes(data)
        out[name] = d
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Standin:
    """One stand-in process, started as a unit would start it (`--config FILE.yaml`)."""

    def __init__(self, tmp: Path, config: dict, env: dict | None = None, argv=(), name="s"):
        self.dir = tmp / name
        self.dir.mkdir()
        self.port = config.setdefault("port", free_port())
        config.setdefault("host", "127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_file = self.dir / "sglang.yaml"
        self.config_file.write_text(yaml.safe_dump(config))
        self.caches = {"HF_MODULES_CACHE": self.dir / "hf-modules",
                       "TRITON_CACHE_DIR": self.dir / "triton",
                       "TORCHINDUCTOR_CACHE_DIR": self.dir / "inductor"}
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLEET_STANDIN_", "HF_"))}
        full_env.update({k: str(v) for k, v in self.caches.items()})
        full_env.update({"GPUFLEET_STANDIN_LOAD_SECONDS": "0", "GPUFLEET_STANDIN_STEP_MS": "1"})
        for key, value in (env or {}).items():  # None: unset (the stand-in's defaults apply)
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        self.env = full_env
        self.log_file = self.dir / "stderr.log"
        self.ready_file = self.dir / "ready.json"
        self.proc = ready.spawn([sys.executable, STANDIN, "--config", self.config_file, *argv],
                                ready_file=self.ready_file, log=self.log_file,
                                stdout=subprocess.DEVNULL, env=full_env)

    @property
    def log(self) -> str:
        return self.log_file.read_text()

    def request(self, method: str, path: str, body=None, headers=None):
        """(status, parsed JSON or raw text, response headers); never raises on HTTP errors."""
        data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT) as resp:
                status, raw, hdrs = resp.status, resp.read(), resp.headers
        except urllib.error.HTTPError as e:
            status, raw, hdrs = e.code, e.read(), e.headers
        text = raw.decode()
        try:
            return status, json.loads(text), hdrs
        except ValueError:
            return status, text, hdrs

    def get(self, path, **kw):
        return self.request("GET", path, **kw)[:2]

    def generate(self, body, headers=None):
        return self.request("POST", "/generate", body=body, headers=headers)[:2]

    def wait_for(self, until=None) -> dict:
        """The stand-in's ready file once it is there (and ``until(info)`` holds); fails if it exits."""
        return ready.wait(self.proc, self.ready_file, what="the stand-in", until=until,
                          timeout=START_DEADLINE, log=self.log_file)

    def wait_log(self, predicate) -> None:
        """Until ``predicate(log text)`` holds; fails if the stand-in exits first."""
        ready.wait_until(lambda: predicate(self.log), alive=self.proc, what="the stand-in",
                         timeout=START_DEADLINE, log=self.log_file)

    def first_answer(self, path="/health") -> int:
        """Status of the first answer once the port listens (the process must stay alive)."""
        self.wait_for()
        return self.get(path)[0]

    def wait_ready(self) -> None:
        """Until /health answers 200 (the ready file says "ready" from that moment on)."""
        self.wait_for(lambda info: info["state"] == "ready")
        assert self.get("/health")[0] == 200

    def wait_exit(self) -> int:
        try:
            return self.proc.wait(timeout=EXIT_DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=EXIT_DEADLINE)
            raise AssertionError(f"stand-in did not exit within {EXIT_DEADLINE}s:\n{self.log}") from None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit()


@pytest.fixture
def start(tmp_path):
    started = []

    def _start(config, env=None, argv=(), name=None):
        s = Standin(tmp_path, dict(config), env, argv, name or f"s{len(started)}")
        started.append(s)
        return s

    yield _start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(timeout=EXIT_DEADLINE)


def spec_config(models, **extra) -> dict:
    return {"model-path": str(models["target"]), "speculative-algorithm": "DFLASH",
            "speculative-draft-model-path": str(models["drafter"]), "trust-remote-code": True,
            "tp-size": 1, "mem-fraction-static": 0.85, **extra}


def stream_events(s: Standin, body: dict, headers=None) -> tuple[str, list]:
    status, raw, hdrs = s.request("POST", "/generate", body={**body, "stream": True}, headers=headers)
    assert status == 200, raw
    assert hdrs["Content-Type"] == "text/event-stream"
    chunks = raw.split("\n\n")
    assert chunks[-1] == "" and chunks[-2] == "data: [DONE]", raw[-200:]
    events = []
    for chunk in chunks[:-2]:
        assert chunk.startswith("data: "), chunk
        events.append(json.loads(chunk[len("data: "):]))
    return raw, events


# ---------------------------------------------------------------- the pure accept model

def test_predicted_accept_mean_exact_cases():
    # Every step accepts the whole block: 100 tokens = 6 x 16 + 4 -> 7 steps.
    assert standin.predicted_accept_mean(16, 16.0, 100) == pytest.approx(100 / 7)
    assert standin.predicted_accept_mean(8, 1.0, 50) == pytest.approx(1.0)
    assert standin.predicted_accept_mean(16, 3.5, 0) == 1.0
    # Truncation at max_new_tokens lowers the figure; long requests approach the configured mean.
    short, long_ = (standin.predicted_accept_mean(16, 3.5, n) for n in (16, 4096))
    assert short < long_ < 3.5
    assert long_ == pytest.approx(3.5, rel=1e-3)
    assert standin.predicted_speedup(16, 3.5, 4096, 1.2) == pytest.approx(long_ / 1.2)
    with pytest.raises(ValueError):
        standin.accept_probability(4, 4.5)


# ---------------------------------------------------------------- start-up and endpoints

def test_health_503_while_loading_then_200_and_model_info(start, models):
    s = start({"model-path": str(models["target"])}, env={"GPUFLEET_STANDIN_LOAD_SECONDS": "3"})
    assert s.first_answer() == 503
    assert s.get("/health_generate")[0] == 503
    assert s.generate({"text": "hi"})[0] == 503
    assert s.get("/ready") == (503, "")
    s.wait_ready()
    # SGLang's bare Response(status_code=...): no body
    assert s.get("/health") == (200, "")
    assert s.get("/health_generate") == (200, "")
    assert s.get("/ready") == (200, "")
    for path in ("/model_info", "/get_model_info"):
        status, info = s.get(path)
        assert status == 200
        assert info == {"model_path": str(models["target"]), "tokenizer_path": str(models["target"]),
                        "is_generation": True, "served_model_name": str(models["target"]),
                        "weight_version": "default", "standin": True}
    log = s.log
    assert "STAND-IN" in log and "standin: ready" in log
    assert log.index("opened target") < log.index("standin: ready")
    assert s.stop() == 0
    assert "standin: stopped" in s.log


def test_autoregressive_generate_shapes(start, models):
    s = start({"model-path": str(models["target"])})
    s.wait_ready()
    status, out = s.generate({"text": "one two three", "sampling_params": {
        "max_new_tokens": 12, "temperature": 0, "ignore_eos": True}})
    assert status == 200
    assert set(out) == {"text", "output_ids", "meta_info"}
    meta = out["meta_info"]
    # As SGLang 0.5.23 without speculative decoding: no spec_* figures at all.
    assert set(meta) == {"id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions",
                         "reasoning_tokens", "completion_tokens", "cached_tokens", "e2e_latency"}
    assert meta["prompt_tokens"] == 3
    assert meta["completion_tokens"] == 12 and len(out["text"].split()) == 12 == len(out["output_ids"])
    assert meta["finish_reason"] == {"type": "length", "length": 12}
    assert meta["e2e_latency"] > 0

    status, out = s.generate({"input_ids": [1, 2, 3, 4, 5], "sampling_params": {"max_new_tokens": 4}})
    assert status == 200 and out["meta_info"]["prompt_tokens"] == 5
    assert out["meta_info"]["completion_tokens"] == 4 and "spec_verify_ct" not in out["meta_info"]

    events = stream_events(s, {"text": "a b", "sampling_params": {"max_new_tokens": 7}})[1]
    assert len(events) == 7  # one event per verify step
    for i, ev in enumerate(events, start=1):
        assert ev["meta_info"]["completion_tokens"] == i
        assert len(ev["text"].split()) == i  # cumulative text
    assert set(events[-1]["meta_info"]) == set(meta)
    # e2e_latency only once finished, as SGLang sets it
    assert all(set(ev["meta_info"]) == set(meta) - {"e2e_latency"} for ev in events[:-1])
    assert [ev["meta_info"]["finish_reason"] for ev in events[:-1]] == [None] * 6
    assert events[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 7}
    assert events[0]["text"] == events[-1]["text"].split()[0]

    status, info = s.get("/server_info")
    assert status == 200
    assert info["version"] == "0.5.23-standin" and info["standin"] is True
    assert info["model_path"] == str(models["target"]) and info["api_key"] is None  # none set
    assert f"--model-path {models['target']}" in info["launch_command"]
    assert info["speculative_algorithm"] is None and info["tp_size"] == 1
    assert "avg_spec_accept_length" not in info["internal_states"][0]
    assert s.get("/get_server_info")[1]["version"] == "0.5.23-standin"

    for bad in (b"not json", {"sampling_params": {}}, {"text": ["a", "b"]},
                {"text": "x", "sampling_params": {"max_new_tokens": -1}},
                {"text": "x", "sampling_params": {"temperature": "hot"}},
                {"text": "x", "stream": "yes"}, {"input_ids": ["a"]}):
        status, err = s.generate(bad)
        assert status == 400 and err["error"], bad
    assert s.get("/nope") == (404, {"detail": "Not Found"})
    assert s.get("/generate") == (405, {"detail": "Method Not Allowed"})
    assert s.stop() == 0


@pytest.mark.parametrize("case", [
    # (speculative-num-draft-tokens, ACCEPT_MEAN, max_new_tokens, requests)
    (None, "3.5", 256, 24),   # block from the drafter's config.json block_size (16)
    (4, "2.0", 37, 60),       # block from the config option; heavy truncation at 37 tokens
], ids=["drafter-block", "num-draft-tokens"])
def test_speculative_accept_length_matches_the_model(start, models, case):
    ndt, mean, max_new, n_requests = case
    extra = {"speculative-num-draft-tokens": ndt} if ndt else {}
    s = start(spec_config(models, **extra),
              env={"GPUFLEET_STANDIN_ACCEPT_MEAN": mean, "GPUFLEET_STANDIN_STEP_MS": "0.5"})
    s.wait_ready()
    block = ndt or DRAFTER_BLOCK
    status, info = s.get("/server_info")
    assert "avg_spec_accept_length" not in info["internal_states"][0]  # absent before any decode-log interval
    assert f'"block": {block}' in s.log  # the delay model in effect, logged at start

    body = {"text": "count to many", "sampling_params": {"max_new_tokens": max_new, "temperature": 0}}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _i: s.generate(body), range(n_requests)))
    metas = [out["meta_info"] for status, out in results if status == 200]
    assert len(metas) == n_requests
    tokens = sum(m["completion_tokens"] for m in metas)
    steps = sum(m["spec_verify_ct"] for m in metas)
    assert all(m["completion_tokens"] == max_new for m in metas)
    # Each step emits 1..block tokens.
    assert all(-(-max_new // block) <= m["spec_verify_ct"] <= max_new for m in metas)
    assert steps >= 200
    predicted = standin.predicted_accept_mean(block, float(mean), max_new)
    assert tokens / steps == pytest.approx(predicted, rel=0.05)

    assert all(m["spec_accept_length"] == m["completion_tokens"] / m["spec_verify_ct"] for m in metas)
    assert all(m["spec_num_proposed_drafts"] == m["spec_verify_ct"] * (block - 1) for m in metas)
    # Folded at decode-log intervals (most of the steps here): near the model, never exact.
    internal = s.get("/server_info")[1]["internal_states"][0]
    assert internal["avg_spec_accept_length"] == pytest.approx(predicted, rel=0.1)
    assert "spec_verify_ct_total" not in internal

    events = stream_events(s, body)[1]
    last = events[-1]["meta_info"]
    assert len(events) == last["spec_verify_ct"] and last["completion_tokens"] == max_new
    assert not any("spec_verify_ct" in ev["meta_info"] for ev in events[:-1])  # only once finished
    counts = [ev["meta_info"]["completion_tokens"] for ev in events]
    assert all(0 < b - a <= block for a, b in zip([0] + counts, counts))
    assert s.stop() == 0


def folded_accept_length(step_tokens: list[int], interval: int) -> float | None:
    """SGLang's avg_spec_accept_length for one request at a time: only whole decode-log intervals
    of verify steps are folded into the lifetime figure; None (absent) before the first."""
    folded = len(step_tokens) // interval * interval
    return sum(step_tokens[:folded]) / folded if folded else None


def test_avg_accept_length_refreshes_at_decode_log_intervals_and_flush_resets(start, models):
    interval = 10
    s = start(spec_config(models, **{"speculative-num-draft-tokens": 4, "decode-log-interval": interval}),
              env={"GPUFLEET_STANDIN_ACCEPT_MEAN": "2.0"})
    s.wait_ready()
    steps: list[int] = []  # tokens of every verify step so far, one request at a time
    seen = []
    for max_new in (5, 9, 16, 23, 40):
        events = stream_events(s, {"text": "x", "sampling_params": {"max_new_tokens": max_new}})[1]
        counts = [ev["meta_info"]["completion_tokens"] for ev in events]
        steps += [b - a for a, b in zip([0] + counts, counts)]
        internal = s.get("/server_info")[1]["internal_states"][0]
        want = folded_accept_length(steps, interval)
        seen.append(want)
        if want is None:
            assert "avg_spec_accept_length" not in internal, (steps, internal)
        else:
            assert internal["avg_spec_accept_length"] == pytest.approx(want, rel=1e-12), steps
    assert seen[0] is None and seen[-1] is not None  # the first request alone never reaches an interval

    status, text = s.request("POST", "/flush_cache")[:2]
    assert (status, text) == (200, standin.FLUSH_OK)
    assert "avg_spec_accept_length" not in s.get("/server_info")[1]["internal_states"][0]
    assert s.request("GET", "/flush_cache")[0] == 200
    assert s.stop() == 0


def test_flush_cache_refused_while_a_request_runs(start, models):
    s = start({"model-path": str(models["target"])})
    s.wait_ready()
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=HTTP_TIMEOUT)
    # 100000 tokens: the request cannot finish on its own while the test runs (steps are 1 ms here).
    body = json.dumps({"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 100000}})
    conn.request("POST", "/generate", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.fp.readline().startswith(b"data: ")  # the request is decoding now
    assert s.request("POST", "/flush_cache")[:2] == (400, "Flush cache failed.\n")
    # With a timeout SGLang waits for the server to go idle, then flushes: the client going away is the event
    # that makes it idle.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        flush = pool.submit(s.request, "POST", "/flush_cache?timeout=600")
        resp.close()
        conn.close()
        assert flush.result()[:2] == (200, standin.FLUSH_OK)
    assert s.request("POST", "/flush_cache?timeout=-1")[0] == 422

    # A client that goes away mid-stream: its request leaves the running set, the flush succeeds.
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=HTTP_TIMEOUT)
    conn.request("POST", "/generate", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.fp.readline().startswith(b"data: ")
    resp.close()
    conn.close()
    assert s.request("POST", "/flush_cache?timeout=600")[:2] == (200, standin.FLUSH_OK)
    assert s.stop() == 0


def test_max_running_requests_resolved_as_sglang_and_admission_enforced(start, models):
    # SGLang 0.5.23 sglang/srt/arg_groups/speculative_hook.py, _handle_dflash: an unset max-running-requests
    # is reset to 48 with DFLASH (the benchmark's baseline must be pinned to it, issue 24 item 4)
    s = start(spec_config(models))
    s.wait_ready()
    info = s.get("/server_info")[1]
    assert info["max_running_requests"] == standin.SPEC_MAX_RUNNING_REQUESTS == 48
    # resolved as SGLang's _handle_dflash does: the drafter's block size
    assert info["speculative_num_draft_tokens"] == DRAFTER_BLOCK
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 48
    assert standin.SPEC_MAX_RUNNING_WARNING in s.log
    assert s.stop() == 0
    # without speculative decoding SGLang leaves it unset; its memory pool sizes admission (2048 or more)
    s = start({"model-path": str(models["target"])})
    s.wait_ready()
    info = s.get("/server_info")[1]
    assert info["max_running_requests"] is None
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == standin.AUTO_MAX_RUNNING_REQUESTS
    assert standin.SPEC_MAX_RUNNING_WARNING not in s.log
    assert s.stop() == 0

    # Admission 1: a second request waits in the scheduler's queue while the first runs.
    s = start({"model-path": str(models["target"]), "max-running-requests": 1})
    s.wait_ready()
    assert s.get("/server_info")[1]["max_running_requests"] == 1
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=HTTP_TIMEOUT)
    body = json.dumps({"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 100000}})
    conn.request("POST", "/generate", body=body, headers={"Content-Type": "application/json"})
    first = conn.getresponse()
    assert first.fp.readline().startswith(b"data: ")  # the first request is decoding now
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        second = pool.submit(s.generate, {"text": "y", "sampling_params": {"max_new_tokens": 4}})

        def queued(_log):
            # SGLang refuses a flush while requests run or wait, and logs both counts
            return s.request("POST", "/flush_cache")[0] == 400 and "#queue-req: 1, #running-req: 1" in s.log

        s.wait_log(queued)
        assert not second.done()
        first.close()
        conn.close()  # the first leaves the running set: the second is admitted and finishes
        status, answer = second.result()
    assert status == 200 and answer["meta_info"]["completion_tokens"] == 4
    assert s.request("POST", "/flush_cache?timeout=600")[:2] == (200, standin.FLUSH_OK)
    assert s.stop() == 0


def test_chat_completions(start, models):
    s = start(spec_config(models, **{"served-model-name": "kimi"}))
    s.wait_ready()
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "count to ten"}]
    body = {"model": "kimi", "messages": messages, "max_completion_tokens": 24, "temperature": 0,
            "return_spec_tokens_details": True}
    status, out, _hdrs = s.request("POST", "/v1/chat/completions", body=body)
    assert status == 200, out
    assert set(out) == {"id", "object", "created", "model", "choices", "usage", "metadata", "sglext"}
    assert out["object"] == "chat.completion" and out["model"] == "kimi"
    choice = out["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["role"] == "assistant"
    assert len(choice["message"]["content"].split()) == 24
    usage = out["usage"]
    prompt = len(standin.render_chat(messages).split())
    assert usage["prompt_tokens"] == prompt and usage["completion_tokens"] == 24
    assert usage["total_tokens"] == prompt + 24
    spec = out["sglext"]["spec_tokens_details"]
    assert spec["spec_accept_length"] == pytest.approx(24 / spec["spec_verify_ct"])

    # Without asking for them there are no speculative figures (as SGLang).
    status, out, _hdrs = s.request("POST", "/v1/chat/completions", body={"messages": messages, "max_tokens": 8})
    assert status == 200 and "sglext" not in out and out["model"] == "default"

    status, raw, hdrs = s.request("POST", "/v1/chat/completions", body={
        **body, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200 and hdrs["Content-Type"] == "text/event-stream"
    chunks = [json.loads(c[len("data: "):]) for c in raw.split("\n\n")[:-2]]
    assert raw.endswith("data: [DONE]\n\n")
    assert chunks[0]["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert len(text.split()) == 24
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] == "length" and set(finish[:-1]) == {None}
    assert chunks[-2]["sglext"]["spec_tokens_details"]["spec_verify_ct"] >= 24 // DRAFTER_BLOCK
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 24

    for bad in ({"messages": []}, {"messages": "hi"}, {"messages": messages, "stream": "yes"}):
        assert s.request("POST", "/v1/chat/completions", body=bad)[0] == 400, bad
    assert s.stop() == 0


def test_same_seed_same_draws(start, models):
    runs = []
    for name in ("a", "b"):
        s = start(spec_config(models), env={"GPUFLEET_STANDIN_SEED": "7"}, name=name)
        s.wait_ready()
        runs.append([s.generate({"text": "x", "sampling_params": {"max_new_tokens": 64}})[1]
                     ["meta_info"]["spec_verify_ct"] for _request in range(5)])
        assert s.stop() == 0
    assert runs[0] == runs[1]


def test_api_key(start, models):
    key = "lab-standin-key-not-a-secret-42"
    s = start({"model-path": str(models["target"]), "api-key": key})
    s.wait_ready()
    good = {"Authorization": f"Bearer {key}"}
    bad = {"Authorization": "Bearer wrong"}
    assert s.get("/health") == (200, "")  # /health stays open
    assert s.get("/ready") == (200, "")
    assert s.get("/health_generate")[0] == 200
    for path in ("/model_info", "/server_info"):
        assert s.get(path) == (401, {"error": "Unauthorized"})
        assert s.get(path, headers=bad)[0] == 401
        assert s.get(path, headers=good)[0] == 200
    body = {"text": "hi", "sampling_params": {"max_new_tokens": 2}}
    assert s.generate(body)[0] == 401
    assert s.generate(body, headers=bad)[0] == 401
    assert s.generate(body, headers=good)[0] == 200
    # As SGLang 0.5.23: /server_info answers the key (to whoever holds it) and so does launch_command;
    # the journal holds it too (`server_args=` at INFO).
    info = s.get("/server_info", headers=good)[1]
    assert info["api_key"] == key and info["admin_api_key"] is None
    assert f"--api-key {key}" in info["launch_command"]
    assert s.stop() == 0
    assert f"'api_key': '{key}'" in s.log


def test_server_args_line_follows_the_log_level(start, models):
    """SGLang 0.5.23's configure_logger() sets the root level from log-level before engine.py logs
    `server_args=` at INFO: at warning the line (keys and all) is not written; at info it is."""
    key = "lab-standin-loglevel-key-7"
    quiet = start({"model-path": str(models["target"]), "api-key": key, "log-level": "warning"})
    quiet.wait_ready()
    assert quiet.stop() == 0
    assert "server_args=" not in quiet.log and key not in quiet.log
    loud = start({"model-path": str(models["target"]), "api-key": key, "log-level": "info"})
    loud.wait_ready()
    assert loud.stop() == 0
    assert "server_args=" in loud.log and f"'api_key': '{key}'" in loud.log


def test_never_ready_knob(start, models):
    s = start({"model-path": str(models["target"])}, env={"GPUFLEET_STANDIN_NEVER_READY": "1"})
    s.wait_log(lambda log: "never ready" in log.lower() or "NEVER_READY=1" in log)
    assert "opened target" in s.log  # the model was read; it just never turns ready
    assert s.get("/health")[0] == 503
    assert s.generate({"text": "x"})[0] == 503
    assert s.stop() == 0


def test_cli_overrides_yaml(start, models):
    port = free_port()
    s = start({"model-path": str(models["target"]), "port": 1},
              argv=["--port", str(port), "--served-model-name", "kimi", "--trust-remote-code"])
    s.url = f"http://127.0.0.1:{port}"
    s.wait_ready()
    assert s.get("/model_info")[1]["served_model_name"] == "kimi"
    info = s.get("/server_info")[1]
    assert info["port"] == port and info["trust_remote_code"] is True
    assert s.stop() == 0


# ---------------------------------------------------------------- failures

@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_bad_shard_exits_1_naming_the_file(start, models, tmp_path, damage):
    target = tmp_path / "target-copy"
    shutil.copytree(models["target"], target)
    shard = target / fixtures.shard_name(2, fixtures.TARGET_SHARDS)
    if damage == "truncate":
        with open(shard, "r+b") as fh:
            fh.truncate(shard.stat().st_size // 2)
    else:
        shard.unlink()
    s = start({"model-path": str(target)})
    assert s.wait_exit() == 1
    assert str(shard) in s.log
    assert "standin: ready" not in s.log


def test_bad_drafter_shard_exits_1(start, models, tmp_path):
    drafter = tmp_path / "drafter-copy"
    shutil.copytree(models["drafter"], drafter)
    with open(drafter / "model.safetensors", "r+b") as fh:
        fh.truncate(1000)
    s = start(spec_config(models, **{"speculative-draft-model-path": str(drafter)}))
    assert s.wait_exit() == 1
    assert str(drafter / "model.safetensors") in s.log


def test_cache_dirs_written(start, models):
    s = start(spec_config(models))
    s.wait_ready()
    pid = s.proc.pid
    dflash = s.caches["HF_MODULES_CACHE"] / "transformers_modules" / models["drafter"].name / "dflash.py"
    assert dflash.read_bytes() == (models["drafter"] / "dflash.py").read_bytes()
    markers = [s.caches[v] / f"gpufleet-standin-{pid}" for v in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")]
    for path in [dflash, *markers]:
        assert path.is_file()
        assert f"standin: wrote {path}" in s.log
    assert f"standin: wrote /dev/shm/gpufleet-standin-{pid}" in s.log
    assert not Path(f"/dev/shm/gpufleet-standin-{pid}").exists()  # created and removed
    assert s.stop() == 0


def test_cache_dir_defaults_follow_home(start, models, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    s = start(spec_config(models), env={"HOME": str(home), "HF_MODULES_CACHE": None,
                                        "TRITON_CACHE_DIR": None})
    s.wait_ready()
    assert (home / ".cache/huggingface/modules/transformers_modules" / models["drafter"].name
            / "dflash.py").is_file()
    assert (home / ".triton/cache" / f"gpufleet-standin-{s.proc.pid}").is_file()
    assert s.stop() == 0


@pytest.mark.parametrize("var", ["HF_MODULES_CACHE", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"])
def test_unwritable_cache_exits_1_naming_the_variable(start, models, tmp_path, var):
    # A path under a regular file cannot be created, even by root (permission bits would not stop root).
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    bad = blocker / "cache"
    s = start(spec_config(models), env={var: str(bad)})
    assert s.wait_exit() == 1
    assert var in s.log and str(bad) in s.log


@pytest.mark.parametrize("config, argv, named", [
    ({"model_path": "/m"}, (), "--model_path"),
    ({"model-path": "/m", "speculative-foo": 3}, (), "--speculative-foo"),
    ({"model-path": "/m"}, ("--tp_size", "2"), "--tp_size"),
    ({"model-path": "/m", "speculative-algorithm": "DFLASHX"}, (), "DFLASHX"),
    ({"model-path": "/m", "port": "eighty"}, (), "--port"),
    ({"host": "127.0.0.1"}, (), "--model-path"),
    ({"model-path": "/m", "nnodes": 2, "node-rank": 2}, (), "--node-rank"),
], ids=["underscore-key", "unknown-key", "underscore-cli", "bad-algorithm", "bad-type",
        "no-model-path", "rank-out-of-range"])
def test_bad_config_exits_2_naming_it(start, config, argv, named):
    s = start(config, argv=argv)
    assert s.wait_exit() == 2
    assert named in s.log
    if "_" in named:
        assert named.replace("_", "-").lstrip("-") in s.log  # the fix: dash form


def test_accept_mean_outside_block_exits_2(start, models):
    s = start(spec_config(models, **{"speculative-num-draft-tokens": 4}),
              env={"GPUFLEET_STANDIN_ACCEPT_MEAN": "5"})
    assert s.wait_exit() == 2
    assert "GPUFLEET_STANDIN_ACCEPT_MEAN" in s.log


def test_ignored_options_are_accepted(start, models):
    s = start({"model-path": str(models["target"]), "context-length": 8192, "attention-backend": "fa3",
               "log-level": "info", "dtype": "bfloat16", "chunked-prefill-size": 4096,
               "max-running-requests": 32, "enable-metrics": True,
               "watchdog-timeout": 600})
    s.wait_ready()
    assert s.get("/server_info")[1]["attention_backend"] == "fa3"
    assert s.stop() == 0


# ---------------------------------------------------------------- ranks and shutdown

def test_rank_1_listens_only_once_ready(start, models):
    # SGLang 0.5.23 (entrypoints/engine.py): a rank > 0 waits for its schedulers (the model loaded),
    # then starts launch_dummy_health_check_server: nothing listens before it is ready.
    dist = {"nnodes": 2, "node-rank": 1, "dist-init-addr": "10.231.0.11:5000"}
    s = start({"model-path": str(models["target"]), **dist}, env={"GPUFLEET_STANDIN_NEVER_READY": "1"})
    s.wait_log(lambda log: "NEVER_READY=1" in log)
    assert "opened target" in s.log  # ranks > 0 open the model too
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", s.port), timeout=HTTP_TIMEOUT).close()
    assert not s.ready_file.exists()
    assert s.stop() == 0

    s = start({"model-path": str(models["target"]), **dist}, env={"GPUFLEET_STANDIN_LOAD_SECONDS": "1"})
    s.wait_for(lambda info: info["state"] == "ready")
    assert s.get("/health") == (200, "")
    # Only SGLang's dummy health check server listens on ranks > 0.
    assert s.get("/health_generate") == (200, "") and s.get("/ping") == (200, "")
    assert s.generate({"text": "x"}) == (404, {"detail": "Not Found"})
    assert s.get("/model_info") == (404, {"detail": "Not Found"})
    assert s.log.index("opened target") < s.log.index("listening on")
    assert s.stop() == 0
    assert "waiting for the rank-0 ShutdownReq broadcast" in s.log


def _stream(s: Standin, path: str, body: dict, request_id: str):
    """A streaming request whose first event has arrived: (connection, response)."""
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=HTTP_TIMEOUT)
    conn.request("POST", path, body=json.dumps({**body, "stream": True}),
                 headers={"Content-Type": "application/json", "X-Request-Id": request_id})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.fp.readline().startswith(b"data: ")
    return conn, resp


def test_sigterm_drains_as_sglang(start, models, tmp_path):
    """SGLang 0.5.23 on SIGTERM (tokenizer_manager.py SignalHandler.sigterm_handler, sigterm_watchdog;
    http_server.py health_generate): /health and /ready 503 at once, in-flight requests finish, NEW
    requests are accepted and served, and the process exits only once none remains. Driven by the
    lab's stall file (no request can finish while it exists), never by the clock."""
    stall = tmp_path / "stall"
    requests_log = tmp_path / "requests.jsonl"
    s = start({"model-path": str(models["target"])},
              env={"GPUFLEET_STANDIN_STALL_FILE": str(stall), "GPUFLEET_STANDIN_REQUEST_LOG": str(requests_log)})
    s.wait_ready()
    conn, first = _stream(s, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 40}}, "req-a")
    stall.touch()  # the first request is decoding: now it cannot finish
    s.proc.send_signal(signal.SIGTERM)
    s.wait_log(lambda log: "SIGTERM received. signum=None frame=None. Draining requests" in log)
    assert s.get("/health") == (503, "") and s.get("/health_generate") == (503, "")
    assert s.get("/ready") == (503, "")
    s.wait_log(lambda log: "Gracefully exiting... Remaining number of requests 1." in log)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        second = pool.submit(s.request, "POST", "/v1/chat/completions",
                             body={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
                             headers={"x-request-id": "req-b"})
        s.wait_log(lambda log: "Gracefully exiting... Remaining number of requests 2." in log)
        loads = s.get("/v1/loads")[1]["loads"][0]
        assert (loads["num_running_reqs"], loads["num_waiting_reqs"]) == (2, 0)
        assert s.proc.poll() is None and not second.done()  # draining, not gone
        stall.unlink()
        status, answer, _h = second.result(timeout=HTTP_TIMEOUT)
    assert status == 200 and answer["choices"][0]["finish_reason"] == "length"  # served while draining
    rest = first.read().decode()
    conn.close()
    assert rest.endswith("data: [DONE]\n\n")
    assert json.loads(rest.split("\n\n")[-3][len("data: "):])["meta_info"]["finish_reason"]["type"] == "length"
    assert s.wait_exit() == 0
    log = s.log
    assert "Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[]." in log
    assert log.rstrip().endswith("standin: stopped")
    lines = [json.loads(line) for line in requests_log.read_text().splitlines()]
    assert [(x["path"], x["stream"], x["request_id"]) for x in lines] == [
        ("/generate", True, "req-a"), ("/v1/chat/completions", False, "req-b")]
    assert lines[0]["t"] <= lines[1]["t"] and all(len(x["rid"]) == 32 for x in lines)
    assert lines[1]["rid"] == answer["id"]


def test_sigterm_while_loading_stops_at_once(start, models):
    # SGLang's launch phase has no SIGTERM handler: nothing to drain, the process ends.
    s = start({"model-path": str(models["target"])}, env={"GPUFLEET_STANDIN_LOAD_SECONDS": "600"})
    assert s.first_answer() == 503
    assert s.stop() == 0
    assert "Draining" not in s.log and s.log.rstrip().endswith("standin: stopped")


def test_v1_loads_counts_running_and_waiting(start, models, tmp_path):
    stall = tmp_path / "stall"
    s = start({"model-path": str(models["target"]), "max-running-requests": 1},
              env={"GPUFLEET_STANDIN_STALL_FILE": str(stall)})
    s.wait_ready()
    status, out = s.get("/v1/loads")
    assert status == 200 and set(out) == {"timestamp", "version", "accelerator", "num_accelerators", "loads"}
    assert (out["loads"][0]["num_running_reqs"], out["loads"][0]["num_waiting_reqs"]) == (0, 0)
    assert out["loads"][0]["dp_rank"] == 0 and out["loads"][0]["max_running_requests"] == 1
    assert s.get("/get_load")[0] == 404  # absent in SGLang 0.5.23
    stall.touch()
    body = {"text": "x", "sampling_params": {"max_new_tokens": 3}}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        pending = [pool.submit(s.generate, body) for _n in range(2)]

        def counted(_log):
            load = s.get("/v1/loads")[1]["loads"][0]
            return (load["num_running_reqs"], load["num_waiting_reqs"]) == (1, 1)

        s.wait_log(counted)
        assert s.get("/v1/loads?dp_rank=1")[1]["loads"] == []
        prom = s.request("GET", "/v1/loads?format=prometheus")[1]
        assert 'sglang_num_running_reqs{dp_rank="0"} 1' in prom
        stall.unlink()
        assert [f.result(timeout=HTTP_TIMEOUT)[0] for f in pending] == [200, 200]
    load = s.get("/v1/loads")[1]["loads"][0]
    assert (load["num_running_reqs"], load["num_waiting_reqs"]) == (0, 0)
    assert s.stop() == 0


def test_health_runs_a_generation(start, models, tmp_path):
    """/health = /health_generate in SGLang 0.5.23: a 1-token generation; a scheduler that produces
    nothing for SGLANG_HEALTH_CHECK_TIMEOUT seconds makes it 503 and the server unhealthy (/ready 503)
    until a check succeeds again; SIGTERM while unhealthy exits without draining."""
    stall = tmp_path / "stall"
    s = start({"model-path": str(models["target"])},
              env={"GPUFLEET_STANDIN_STALL_FILE": str(stall), "SGLANG_HEALTH_CHECK_TIMEOUT": "2"})
    s.wait_ready()
    assert s.get("/health") == (200, "")
    stall.touch()
    assert s.get("/health") == (503, "")
    assert "Health check failed. Server couldn't get a response from detokenizer for last 2 seconds" in s.log
    assert s.get("/ready") == (503, "")
    stall.unlink()
    assert s.get("/health") == (200, "")
    assert s.get("/ready") == (200, "")
    stall.touch()
    assert s.get("/health_generate") == (503, "")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        stuck = pool.submit(s.generate, {"text": "x", "sampling_params": {"max_new_tokens": 3}})
        s.wait_log(lambda _log: s.get("/v1/loads")[1]["loads"][0]["num_running_reqs"] >= 1)
        assert s.stop() == 0  # a request is stuck, yet no drain: SGLang force-exits when unhealthy
        assert "Signal SIGTERM received while health check failed. Force exiting." in s.log
        with pytest.raises(Exception):
            stuck.result(timeout=HTTP_TIMEOUT)


# ---------------------------------------------------------------- on the lab hosts

LAB_JSON = Path(os.environ.get("GPUFLEET_LAB_CACHE", os.path.expanduser("~/.cache/gpufleet-lab"))) / "run" / "lab.json"
SSH_OPTS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
            "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=5"]


@pytest.mark.lab
def test_lab_hosts_import_the_standin():
    try:
        lab = json.loads(LAB_JSON.read_text())
    except (OSError, ValueError):
        pytest.skip(f"the lab is not up ({LAB_JSON} missing): run `tests/lab/labctl.py up`")
    want = hashlib.sha256(STANDIN.read_bytes()).hexdigest()
    code = ("import gpufleet_lab_sglang as g, hashlib; "
            "print(hashlib.sha256(open(g.__file__, 'rb').read()).hexdigest(), g.__file__)")
    for host in sorted(lab["hosts"]):
        addr = lab["hosts"][host]["address"]
        proc = subprocess.run(["ssh", "-i", lab["ssh_key"], *SSH_OPTS, f"root@{addr}",
                               f"/opt/sglang/0.5.23/bin/python -c \"{code}\""],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                              check=False)
        assert proc.returncode == 0, f"{host}: {proc.stderr}"
        digest, path = proc.stdout.split()
        assert path == "/opt/sglang/0.5.23/lib/python3.11/site-packages/gpufleet_lab_sglang.py"
        assert digest == want, f"{host} runs an older stand-in: rebuild the rootfs (labctl.py rootfs)"
