"""The SGLang stand-in must never be kinder than SGLang 0.5.23 (issue 11, item 11).

Every route and every answer field the stand-in offers must exist in SGLang 0.5.23. The names are
READ from SGLang's own source, as the lab image holds it (its rootfs SGLang venv; else the SGLang
wheel the image is installed from), never typed in here:

- routes: the `@app.get/post/put/api_route(...)` decorators of sglang/srt/entrypoints/http_server.py
  (parsed with `ast`; a route read from `os.environ.get(VAR, "/default")` counts with its default);
- /server_info: the keys its handler adds, build_server_info's, and every server argument (the
  fields of sglang/srt/arg_groups/fields/*.py, which the answer spreads);
- internal_states[0]: the keys SchedulerInternalStateController writes, plus the server arguments;
- /model_info: the keys of its handler's dict;
- /generate: the keys TokenizerManager writes into meta_info and into the answer (out_dict), and
  FINISH_LENGTH's finish_reason;
- /v1/chat/completions: the fields of the protocol classes the answer is made of;
- /flush_cache: the answer text of its handler; /health: the handler answers a bare Response.
- /v1/loads (srt/entrypoints/v1_loads.py, a router the app includes): its route, the keys of its answer
  and LoadSnapshot's fields (srt/managers/load_snapshot.py);
- the drain on SIGTERM, /health's generation, ranks > 0 and the `server_args=` log line (issue 22):
  the constants and the order of calls the stand-in copies, read from tokenizer_manager.py
  (SignalHandler.sigterm_handler, sigterm_watchdog), http_server.py (health_generate), engine.py.

Then a live stand-in (speculative and not) is asked, and every key it answers with must be among
them. The only exception is the lab's `standin: true` marker in /server_info and /model_info (the
collection labels stand-in figures with it; it is checked to clash with no SGLang name).
"""

from __future__ import annotations

import ast
import json
import zipfile

import pytest

import hosts  # noqa: E402  (tests/lab on sys.path via conftest)
# models and start are pytest fixtures: imported here, pytest finds them by name.
from test_sglang_standin import models, start  # noqa: F401  pylint: disable=unused-import
from test_sglang_standin import spec_config, standin, stream_events

SGLANG_VERSION = "0.5.23"
SITE = f"opt/sglang/{SGLANG_VERSION}/lib/python3.11/site-packages"
# The stand-in's self-identification (docs/lab.md): allowed only here, and only while SGLang has no
# field of that name.
LAB_MARKERS = {"server_info": {"standin"}, "model_info": {"standin"}}
CHAT_CLASSES = {
    "srt/entrypoints/openai/protocol.py": ("ChatCompletionResponse", "ChatCompletionResponseChoice", "ChatMessage",
                                           "UsageInfo", "ChatCompletionStreamResponse", "SglExt",
                                           "SpecTokensDetails", "PromptTokensDetails",
                                           "CompletionTokensDetails"),
    "srt/entrypoints/openai/sse_utils.py": ("StreamChunk", "StreamChoice", "StreamDelta"),
}


class Source:
    """SGLang's package source, from the lab image's site-packages or the wheel it is built from."""

    def __init__(self):
        image = hosts.rootfs_dir() / SITE / "sglang"
        wheels = sorted((hosts.cache_dir() / "wheelhouse" / "sglang").glob(f"sglang-{SGLANG_VERSION}-*.whl"))
        self.image = image if (image / "srt" / "entrypoints" / "http_server.py").is_file() else None
        self.wheel = wheels[-1] if wheels else None
        if self.image is None and self.wheel is None:
            pytest.skip(f"no SGLang {SGLANG_VERSION} source: neither the lab image ({image}) nor the wheelhouse "
                        "is built (run `make setup`, or `python tests/lab/wheelhouse.py build`)")
        self.where = str(self.image or self.wheel)

    def read(self, rel: str) -> str:
        if self.image is not None:
            return (self.image / rel).read_text(encoding="utf-8")
        with zipfile.ZipFile(self.wheel) as zf:
            return zf.read(f"sglang/{rel}").decode("utf-8")

    def tree(self, rel: str) -> ast.Module:
        return ast.parse(self.read(rel), filename=rel)

    def list(self, rel_dir: str) -> list[str]:
        if self.image is not None:
            return sorted(str(p.relative_to(self.image)) for p in (self.image / rel_dir).glob("*.py"))
        with zipfile.ZipFile(self.wheel) as zf:
            prefix = f"sglang/{rel_dir}/"
            return sorted(n[len("sglang/"):] for n in zf.namelist()
                          if n.startswith(prefix) and n.endswith(".py") and "/" not in n[len(prefix):])


# ---------------------------------------------------------------- reading SGLang's source

def _function(tree: ast.AST, name: str) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    raise AssertionError(f"SGLang's source has no function {name}: the reader needs updating")


def _class(tree: ast.AST, name: str) -> ast.ClassDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"SGLang's source has no class {name}: the reader needs updating")


def _str(node) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    # os.environ.get("VAR", "/default"): the route SGLang serves unless the variable is set
    if isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv") \
            and len(node.args) == 2:
        return _str(node.args[1])
    return None


def _dict_keys(node: ast.Dict) -> set[str]:
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def keys_written(scope: ast.AST, var: str) -> set[str]:
    """Every string key `var` gets in `scope`: `var = {...}`, `var["k"] = ...`, `var.update({...})`
    and `var.update(k=...)`."""
    keys: set[str] = set()
    for node in ast.walk(scope):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id == var and isinstance(node.value, ast.Dict):
                    keys |= _dict_keys(node.value)
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                        and target.value.id == var and _str(target.slice) is not None:
                    keys.add(_str(target.slice))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == var:
            keys |= {kw.arg for kw in node.keywords if kw.arg}
            keys |= {k for arg in node.args if isinstance(arg, ast.Dict) for k in _dict_keys(arg)}
    return keys


def class_fields(tree: ast.AST, name: str) -> set[str]:
    return {node.target.id for node in _class(tree, name).body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}


def routes(tree: ast.AST, app: str = "app") -> set[tuple[str, str]]:
    """(METHOD, path) of every ``@<app>.get/post/...(path)`` decorator in ``tree``."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)
                    and isinstance(deco.func.value, ast.Name) and deco.func.value.id == app and deco.args):
                continue
            path = _str(deco.args[0])
            verb = deco.func.attr
            if path is None:
                continue
            if verb in ("get", "post", "put", "delete", "patch"):
                found.add((verb.upper(), path))
            elif verb == "api_route":
                methods = next((kw.value for kw in deco.keywords if kw.arg == "methods"), None)
                names = [_str(m) for m in methods.elts] if isinstance(methods, ast.List) else ["GET"]
                found |= {(m.upper(), path) for m in names if m}
    return found


@pytest.fixture(scope="module")
def sglang() -> dict:
    """Route and field names of SGLang 0.5.23, read from its source."""
    src = Source()
    version_src = src.read("version.py") + src.read("_version.py")
    assert SGLANG_VERSION in version_src, f"{src.where} is not SGLang {SGLANG_VERSION}"
    http = src.tree("srt/entrypoints/http_server.py")
    server_args = set()
    for rel in src.list("srt/arg_groups/fields"):
        tree = src.tree(rel)
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            server_args |= class_fields(tree, cls.name)
    common = src.tree("srt/utils/common.py")
    internal = src.tree("srt/managers/scheduler_components/internal_state.py")
    tokenizer = src.tree("srt/managers/tokenizer_manager.py")
    batch = src.tree("srt/managers/schedule_batch.py")
    chat = set()
    for rel, classes in CHAT_CLASSES.items():
        tree = src.tree(rel)
        for name in classes:
            chat |= class_fields(tree, name)
    # ChatCompletionResponse.metadata is a plain dict: its keys are the weight-version helper's.
    chat |= keys_written(_function(src.tree("srt/utils/weight_versions.py"),
                                   "build_endpoint_weight_version_metadata"), "metadata")
    out_scope = _function(tokenizer, "_handle_batch_output")
    flush = _function(http, "flush_cache")
    # server_info's own keys (startup_time, internal_states, version, ...) around the spread build_server_info
    info_keys = {k for node in ast.walk(_function(http, "server_info")) if isinstance(node, ast.Dict)
                 for k in _dict_keys(node)}
    loads_src = src.tree("srt/entrypoints/v1_loads.py")
    # the app includes the /v1/loads router (http_server.py: app.include_router(v1_loads_router))
    assert "app.include_router(v1_loads_router)" in src.read("srt/entrypoints/http_server.py")
    snapshot = src.tree("srt/managers/load_snapshot.py")
    loads_answer = {k for node in ast.walk(_function(loads_src, "get_loads")) if isinstance(node, ast.Dict)
                    for k in _dict_keys(node)}
    return {
        "where": src.where,
        "src": src,
        "routes": routes(http) | routes(loads_src, "router"),
        "loads": loads_answer,
        "load_snapshot": class_fields(snapshot, "LoadSnapshot"),
        "server_args": server_args,
        "server_info": info_keys | keys_written(_function(common, "build_server_info"), "result") | server_args,
        "internal_states": keys_written(_class(internal, "SchedulerInternalStateController"), "state") | server_args,
        "model_info": keys_written(_function(http, "model_info"), "result"),
        "meta_info": (keys_written(out_scope, "meta_info")
                      | keys_written(_function(tokenizer, "_calculate_spec_decoding_metrics"), "meta_info")),
        "generate": keys_written(out_scope, "out_dict"),
        "finish_reason": {k for node in ast.walk(_function(_class(batch, "FINISH_LENGTH"), "to_json"))
                          if isinstance(node, ast.Dict) for k in _dict_keys(node)},
        "chat": chat,
        "flush_texts": {n.value for n in ast.walk(flush) if isinstance(n, ast.Constant) and isinstance(n.value, str)},
        "health_returns": [ast.unparse(n.value) for n in ast.walk(_function(http, "health_generate"))
                           if isinstance(n, ast.Return)],
    }


def test_the_reader_finds_what_sglang_has(sglang):
    """The reader must see SGLang's real names (an empty or too-narrow read would prove nothing),
    and SGLang 0.5.23 really has no spec_verify_ct_total (issue 11)."""
    assert {("GET", "/health"), ("GET", "/server_info"), ("POST", "/generate"), ("GET", "/flush_cache"),
            ("POST", "/flush_cache"), ("POST", "/v1/chat/completions")} <= sglang["routes"]
    assert {"model_path", "speculative_algorithm", "decode_log_interval", "tp_size"} <= sglang["server_args"]
    assert "avg_spec_accept_length" in sglang["internal_states"]
    assert "last_gen_throughput" in sglang["internal_states"]
    assert "spec_verify_ct_total" not in sglang["internal_states"] | sglang["server_info"]
    assert {"spec_verify_ct", "completion_tokens", "e2e_latency", "finish_reason"} <= sglang["meta_info"]
    assert {"text", "output_ids", "meta_info"} <= sglang["generate"]
    assert {"usage", "choices", "prompt_tokens", "spec_tokens_details", "delta"} <= sglang["chat"]
    assert sglang["finish_reason"] == {"type", "length"}
    for table, markers in LAB_MARKERS.items():
        assert not markers & (sglang[table] | sglang["chat"] | sglang["meta_info"]), table


def test_standin_routes_exist_in_sglang(sglang):
    extra = sorted(set(standin.ROUTES) - sglang["routes"])
    assert not extra, f"the stand-in serves routes SGLang {SGLANG_VERSION} ({sglang['where']}) has not: {extra}"


def test_standin_options_exist_in_sglang(sglang):
    """Every option the stand-in accepts is a server argument of SGLang (which exits 2 on any other):
    a config the stand-in takes and SGLang refuses would pass in the lab and fail on a GPU host."""
    extra = sorted(o for o in standin.ALL_OPTIONS if o.replace("-", "_") not in sglang["server_args"])
    assert not extra, f"the stand-in accepts options SGLang {SGLANG_VERSION} ({sglang['where']}) has not: {extra}"


def test_standin_flush_and_health_answers_are_sglangs(sglang):
    assert standin.FLUSH_OK in sglang["flush_texts"]
    assert "Flush cache failed.\n" in sglang["flush_texts"]
    # Every return of SGLang's /health handler is a bare Response: the stand-in answers no body.
    assert sglang["health_returns"] and all(r.startswith("Response(status_code=") and "content" not in r
                                            for r in sglang["health_returns"])


def _extra(got, allowed: set[str], where: str) -> list[str]:
    return [f"{where}.{k}" for k in sorted(set(got) - allowed)]


def _chat_keys(obj, prefix: str = "") -> set[str]:
    """Every key of a chat answer, at any depth (usage/choices/delta/... are all protocol fields)."""
    keys = set()
    if isinstance(obj, dict):
        for key, value in obj.items():
            keys.add(key)
            if key != "meta_info":  # the /generate meta_info, checked as such
                keys |= _chat_keys(value)
    elif isinstance(obj, list):
        for item in obj:
            keys |= _chat_keys(item)
    return keys


@pytest.mark.parametrize("speculative", [False, True], ids=["autoregressive", "speculative"])
def test_standin_answers_only_sglang_fields(sglang, start, models, speculative):
    config = (spec_config(models, **{"decode-log-interval": 2}) if speculative
              else {"model-path": str(models["target"]), "decode-log-interval": 2})
    s = start(config)
    s.wait_ready()
    extra = []
    body = {"text": "a b c", "sampling_params": {"max_new_tokens": 24, "temperature": 0}}
    status, out = s.generate(body)
    assert status == 200, out
    extra += _extra(out, sglang["generate"], "/generate")
    extra += _extra(out["meta_info"], sglang["meta_info"], "/generate meta_info")
    extra += _extra(out["meta_info"]["finish_reason"], sglang["finish_reason"], "finish_reason")
    for event in stream_events(s, body)[1]:
        extra += _extra(event, sglang["generate"], "/generate stream")
        extra += _extra(event["meta_info"], sglang["meta_info"], "/generate stream meta_info")
    info = s.get("/server_info")[1]
    extra += _extra(info, sglang["server_info"] | LAB_MARKERS["server_info"], "/server_info")
    state = info["internal_states"][0]
    extra += _extra(state, sglang["internal_states"], "/server_info internal_states[0]")
    extra += _extra(s.get("/model_info")[1], sglang["model_info"] | LAB_MARKERS["model_info"], "/model_info")
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 24, "return_spec_tokens_details": True,
            "return_meta_info": True}
    status, answer, _h = s.request("POST", "/v1/chat/completions", body=chat)
    if status == 200:
        extra += _extra(_chat_keys(answer), sglang["chat"], "/v1/chat/completions")
        extra += _extra(answer["choices"][0]["meta_info"], sglang["meta_info"], "/v1/chat/completions meta_info")
        raw = s.request("POST", "/v1/chat/completions", body={**chat, "stream": True,
                                                              "stream_options": {"include_usage": True}})[1]
        for chunk in raw.split("\n\n")[:-2]:
            extra += _extra(_chat_keys(json.loads(chunk[len("data: "):])), sglang["chat"], "chat stream")
    assert not extra, (f"the stand-in answers with fields SGLang {SGLANG_VERSION} ({sglang['where']}) does not "
                       f"have: {extra}")
    assert status == 200, answer  # /v1/chat/completions (H7's benchmark sends chat prompts)
    # What a finished speculative request reports, SGLang reports too (and the lifetime figure
    # exists once a decode-log interval has passed).
    assert ("avg_spec_accept_length" in state) == speculative
    assert ("spec_verify_ct" in out["meta_info"]) == speculative
    assert s.stop() == 0


# ---------------------------------------------------------------- issue 22: drain, /v1/loads, /health, ranks, keys

def _sleeps(func: ast.AST) -> list[float]:
    """The literal seconds of every ``asyncio.sleep(N)`` awaited in ``func``, in source order."""
    return [node.args[0].value for node in ast.walk(func)
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "asyncio.sleep"
            and node.args and isinstance(node.args[0], ast.Constant)]


def _strings(func: ast.AST) -> str:
    """Every string constant in ``func`` (f-string parts included), joined."""
    return "\n".join(n.value for n in ast.walk(func) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def test_drain_is_sglangs(sglang):
    """tokenizer_manager.py: SignalHandler.sigterm_handler sets gracefully_exit and warns;
    sigterm_watchdog polls it every 5 s, then logs the remaining requests every 5 s until rid_to_state
    is empty, force-exiting when the server is unhealthy or SGL_FORCE_SHUTDOWN is set. http_server.py
    health_generate answers 503 first thing once gracefully_exit is set; /ready is is_ready(), which is
    false while draining; the generate handlers do not look at the flag (new requests are served)."""
    src = sglang["src"]
    tm = src.tree("srt/managers/tokenizer_manager.py")
    watchdog = _function(tm, "sigterm_watchdog")
    assert _sleeps(watchdog) == [standin.DRAIN_POLL_SECONDS] * 2
    text = _strings(watchdog)
    for needle in ("Gracefully exiting... Remaining number of requests ", "Remaining requests remaining_rids=",
                   "Signal SIGTERM received while health check failed. Force exiting.",
                   "Signal SIGTERM received while force shutdown flag set. Force exiting.", "SGL_FORCE_SHUTDOWN"):
        assert needle in text, needle
    handler = _function(_class(tm, "SignalHandler"), "sigterm_handler")
    assert "SIGTERM received. " in _strings(handler) and "Draining requests and shutting down..." in _strings(handler)
    assert "gracefully_exit = True" in ast.unparse(handler)
    # installed with loop.add_signal_handler(SIGTERM, handler): called without arguments (signum=None frame=None)
    assert "loop.add_signal_handler(signal.SIGTERM, signal_handler.sigterm_handler)" in ast.unparse(
        _function(tm, "auto_create_handle_loop"))
    assert "not self.gracefully_exit" in ast.unparse(_function(tm, "is_healthy"))
    assert "self.is_healthy()" in ast.unparse(_function(tm, "is_ready"))
    http = src.tree("srt/entrypoints/http_server.py")
    health = _function(http, "health_generate")
    first_if = next(node for node in health.body if isinstance(node, ast.If))
    assert "gracefully_exit" in ast.unparse(first_if.test) and "status_code=503" in ast.unparse(first_if.body)
    assert "Health check request received during shutdown. Returning 503." in _strings(first_if)
    for name in ("generate_request", "_handle_batch_output"):
        assert "gracefully_exit" not in ast.unparse(_function(tm, name)), name


def test_health_is_a_one_token_generation(sglang):
    """/health and /health_generate are one handler; it sends a max_new_tokens=1 request, looks every
    1 s whether anything came back since it began, and marks the server unhealthy after
    HEALTH_CHECK_TIMEOUT (SGLANG_HEALTH_CHECK_TIMEOUT, default 20) seconds; /health generates unless
    SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION is false (default true)."""
    src = sglang["src"]
    http = src.tree("srt/entrypoints/http_server.py")
    health = _function(http, "health_generate")
    decorated = {_str(d.args[0]) for d in health.decorator_list if isinstance(d, ast.Call) and d.args}
    assert decorated == {"/health", "/health_generate"}
    assert standin.ROUTES[("GET", "/health")] is standin.ROUTES[("GET", "/health_generate")]
    code = ast.unparse(health)
    assert "'max_new_tokens': 1" in code and "last_receive_tstamp > tic" in code
    assert "ServerStatus.UnHealthy" in code and "ServerStatus.Up" in code
    assert _sleeps(health) == [standin.HEALTH_POLL_SECONDS]
    assert "Health check failed. Server couldn't get a response from detokenizer for last " in _strings(health)
    assert "int(os.getenv('SGLANG_HEALTH_CHECK_TIMEOUT', 20))" in src.read("srt/entrypoints/http_server.py").replace(
        '"', "'")
    assert "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION = EnvBool(True)" in src.read("srt/environ.py")


def test_v1_loads_is_sglangs(sglang, start, models):
    assert ("GET", "/v1/loads") in sglang["routes"] and ("GET", "/v1/loads") in standin.ROUTES
    # /get_load is gone in 0.5.23 (the router's load-based policies see -1): absent here too
    assert not {r for r in sglang["routes"] if r[1] == "/get_load"}
    assert ("GET", "/get_load") not in standin.ROUTES
    assert {"num_running_reqs", "num_waiting_reqs", "dp_rank"} <= sglang["load_snapshot"]
    s = start({"model-path": str(models["target"])})
    s.wait_ready()
    status, out = s.get("/v1/loads")
    assert status == 200
    extra = _extra(out, sglang["loads"], "/v1/loads") + _extra(out["loads"][0], sglang["load_snapshot"], "loads[0]")
    assert not extra, f"/v1/loads fields SGLang {SGLANG_VERSION} has not: {extra}"
    assert s.get("/get_load")[0] == 404
    assert s.stop() == 0


def test_keys_leak_where_sglang_leaks_them(sglang, start, models):
    """engine.py logs `server_args={resolved_dict()}` at INFO and build_server_info spreads the resolved
    args and launch_command into /server_info; the only redaction (watermarking/core.py) is of the
    watermark secrets, never api_key / admin_api_key."""
    src = sglang["src"]
    engine = src.read("srt/entrypoints/engine.py")
    assert 'logger.info(f"server_args={_server_args_for_logging(server_args)}")' in engine
    assert "redact_watermark_secrets(server_args.resolved_dict())" in ast.unparse(
        _function(src.tree("srt/entrypoints/engine.py"), "_server_args_for_logging"))
    watermark = src.tree("srt/sampling/watermarking/core.py")
    redacted = next(node.value for node in ast.walk(watermark) if isinstance(node, ast.Assign)
                    and ast.unparse(node.targets[0]) == "WATERMARK_SECRET_FIELD_NAMES")
    assert "api_key" not in ast.unparse(redacted)
    build = ast.unparse(_function(src.tree("srt/utils/common.py"), "build_server_info"))
    assert "server_args.resolved_dict()" in build and "result['launch_command'] = server_args.launch_command" in build
    assert {"api_key", "admin_api_key", "launch_command"} <= sglang["server_info"]
    # launch_command: the merged argv joined by spaces (server_args.py prepare_server_args)
    prepare = _function(src.tree("srt/server_args.py"), "prepare_server_args")
    assert "redact_watermark_command_line(argv, " in ast.unparse(prepare)
    assert "return config_args + before_config + after_config" in src.read("srt/utils/server_args_config_parser.py")
    key, admin = "sk-fidelity-KEY", "sk-fidelity-ADMIN"
    s = start({"model-path": str(models["target"]), "api-key": key, "admin-api-key": admin, "trust-remote-code": True},
              argv=["--served-model-name", "kimi"])
    s.wait_ready()
    info = s.get("/server_info", headers={"Authorization": f"Bearer {key}"})[1]
    assert info["api_key"] == key and info["admin_api_key"] == admin
    words = info["launch_command"].split()
    assert words[-2:] == ["--served-model-name", "kimi"] and "--config" not in words  # config first, then the CLI
    assert words[words.index("--api-key") + 1] == key and words[words.index("--admin-api-key") + 1] == admin
    assert "--trust-remote-code" in words and "true" not in words  # a store_true flag, bare
    assert s.stop() == 0
    assert f"'api_key': '{key}'" in s.log and f"'admin_api_key': '{admin}'" in s.log


def test_ranks_above_0_listen_once_ready(sglang):
    """engine.py: a node_rank >= 1 process waits for its schedulers (wait_for_ready) before it starts
    launch_dummy_health_check_server, and its SIGTERM handler only logs (rank 0 stops every rank)."""
    engine = sglang["src"].tree("srt/entrypoints/engine.py")
    order = {}
    for node in ast.walk(engine):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func).rsplit(".", 1)[-1]
            if name in ("wait_for_ready", "launch_dummy_health_check_server"):
                order.setdefault(name, node.lineno)
    assert order["wait_for_ready"] < order["launch_dummy_health_check_server"], order
    assert "waiting for the rank-0 ShutdownReq broadcast to stop the schedulers." in _strings(engine)
