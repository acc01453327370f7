"""gpufleet lab SGLang STAND-IN: a small server started where SGLang would run. It is NOT SGLang.

The lab has no GPU, so the sglang role's unit runs this module in the lab instead of
`sglang.launch_server` (role variable `sglang_launch_module: gpufleet_lab_sglang`). It is started
exactly as SGLang is:

    <python> -m gpufleet_lab_sglang --config /etc/sglang/<instance>.yaml [--key value | --flag ...]
                                    [--ready-file PATH]

and models, openly, what the collection depends on: the same dash-form YAML (an underscore key or
an unknown key exits 2 naming it, as SGLang 0.5.23 does), the cache directories a real start writes
to, a loader that opens every shard with safetensors (a bad model exits 1 naming the file), and
SGLang 0.5.23's HTTP answers: /health and /health_generate (one handler: a 1-token generation),
/ready (503 while "loading" or draining, then 200, no body), /model_info, /server_info (the keys and
launch_command included, as SGLang leaks them), /generate (also streamed), /flush_cache,
/v1/chat/completions, /v1/loads, an API key, multi-node ranks (ranks > 0 listen only once ready),
and SGLang's drain on SIGTERM (class Drain). Its speed figures come from the delay model
below and say NOTHING about GPU performance. What it models is listed in docs/lab.md ("SGLang
stand-in").

Never kinder than SGLang 0.5.23: every route, option and answer field here exists in SGLang 0.5.23
under the same name and type (tests/lab/tests/test_standin_fidelity.py reads them from SGLang's
source in the lab image and fails otherwise); the only addition is the `"standin": true` marker in
/server_info and /model_info. Per-request speculative figures (meta_info `spec_verify_ct`,
`spec_accept_length`, ...) come only in a request's last answer and only with speculative decoding;
the server-wide `avg_spec_accept_length` is refreshed at decode-log intervals (State below).

`--ready-file PATH` (the lab's own option, not SGLang's; tests and benchmarks start it with
tests/lab/ready.py): once the port listens, PATH gets `{"state": "loading", "url", "host", "port",
"rank", "pid"}`, replaced by the same with `"state": "ready"` when /health turns 200 (never with
GPUFLEET_STANDIN_NEVER_READY=1). Each write is a rename: a reader never sees half a document.

`GPUFLEET_STANDIN_REQUEST_LOG=PATH` (the lab's own, not SGLang's; for the router proof): one JSON
line per /generate or /v1/chat/completions request at its arrival, `{"t": time.time(), "path", "rid",
"stream", "request_id"}` (request_id: the X-Request-Id header, else null), one write() per line on an
O_APPEND descriptor. `GPUFLEET_STANDIN_STALL_FILE=PATH` (the lab's own): while PATH exists the
scheduler produces nothing (a hung GPU), so tests drive drains and failed health checks by events.

Only the standard library plus safetensors, numpy and PyYAML (all in the lab's SGLang venv).

Delay and accept model (open on purpose, so tests can predict what they measure)
---------------------------------------------------------------------------------
- Every verify step sleeps STEP_MS milliseconds (`GPUFLEET_STANDIN_STEP_MS`, default 20), paced
  against a per-request deadline so HTTP overhead does not accumulate. Requests are served by
  threads and step in parallel, as a batching server would: throughput scales with concurrency.
- Not speculative (no `speculative-algorithm`): one token per step; no spec_* figures (as SGLang).
- Speculative: each step emits k = 1 + Binomial(block - 1, p) tokens, truncated to what is left of
  max_new_tokens. block = `speculative-num-draft-tokens`, else the drafter's config.json
  `block_size`, else 8. p = (ACCEPT_MEAN - 1) / (block - 1), so the untruncated mean of k is
  ACCEPT_MEAN (`GPUFLEET_STANDIN_ACCEPT_MEAN`, default 3.5, must lie in [1, block]). A speculative
  step costs STEP_MS * SPEC_COST ms (`GPUFLEET_STANDIN_SPEC_COST`, default 1.2).
- Randomness: `random.Random(f"{SEED}:{request_number}")` per request (`GPUFLEET_STANDIN_SEED`,
  default 0; request_number counts /generate and /v1/chat/completions requests from 0 in arrival
  order): a given sequence
  of requests gives the same draws.
- Hence, at equal concurrency, predicted speedup = ACCEPT_MEAN / SPEC_COST before truncation;
  exactly, for requests of N new tokens, accept length = N / E[steps(N)] (what
  completion_tokens / spec_verify_ct summed over many requests converges to, and what /server_info
  reports once folded) and speedup = N / (E[steps(N)] * SPEC_COST): see predicted_accept_mean(),
  expected_verify_steps(), predicted_speedup(). (The mean of per-request ratios is a different,
  slightly larger number.)
- /server_info `internal_states[0].avg_spec_accept_length`, as SGLang 0.5.23 computes it: lifetime
  accepted tokens / lifetime verify forwards, where the lifetime counters take in the per-interval
  ones only every `decode-log-interval` (default 40) decode iterations. Absent before the first
  fold and after /flush_cache (which resets the counters); absent when not speculative. One verify
  step of a request counts 1/running of a decode iteration (State). The knobs in effect are logged
  at start (`delay model: {...}`).

Admission, as SGLang 0.5.23 resolves it: `max-running-requests` unset becomes 48 with any
speculative algorithm (speculative_hook.py, logged with SGLang's warning) and stays unset (null in
/server_info) without; the scheduler admits that many at once (unset: AUTO_MAX_RUNNING_REQUESTS,
2048, the floor of SGLang's memory-derived value, as internal_states[0]
`effective_max_running_requests_per_dp`), the others wait in its queue; /flush_cache refuses while
any request runs or waits.

Other knobs: `GPUFLEET_STANDIN_LOAD_SECONDS` (default 2): extra seconds of "loading" after the
model was read (/health 503 meanwhile). `GPUFLEET_STANDIN_NEVER_READY=1`: /health stays 503 forever
(rollback tests). SIGTERM once up: SGLang's drain (class Drain: /health 503, requests in flight and
new ones served, checked every 5 s as SGLang's sigterm_watchdog, exit 0 once none remains); SIGTERM
while loading, or SIGINT: stop at once. Either way `standin: stopped` is logged last.

Exit codes: 0 stopped by signal, 1 start-up failure (cache dir not writable, bad model, port
taken), 2 bad configuration (as argparse).
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import os
import random
import shutil
import signal
import sys
import threading
import time
import urllib.parse
from fractions import Fraction
from math import comb
from pathlib import Path

PROG = "gpufleet_lab_sglang"
VERSION = "0.5.23-standin"
LOG_PREFIX = "standin: "
WEIGHT_VERSION = "default"  # SGLang's --weight-version default, echoed in every meta_info
# SGLang 0.5.23's /flush_cache answer (plain text, no content type), word for word.
FLUSH_OK = ("Cache flushed.\nPlease check backend logs for more details. "
            "(When there are running or waiting requests, the operation will not be performed.)\n")

# Options the stand-in reads (SGLang dash form) -> (type, default).
OPTIONS = {
    "model-path": (str, None),
    "host": (str, "127.0.0.1"),
    "port": (int, 30000),
    "api-key": (str, None),
    "admin-api-key": (str, None),
    "served-model-name": (str, None),
    "tp-size": (int, 1),
    "mem-fraction-static": (float, None),
    "trust-remote-code": (bool, False),
    "speculative-algorithm": (str, None),
    "speculative-draft-model-path": (str, None),
    "speculative-num-draft-tokens": (int, None),
    "nnodes": (int, 1),
    "node-rank": (int, 0),
    "dist-init-addr": (str, None),
    "decode-log-interval": (int, 40),
    "max-running-requests": (int, None),
}
# Real SGLang options the stand-in accepts and ignores (anything else is unknown -> exit 2).
IGNORED_OPTIONS = {
    "context-length": (int, None),
    "attention-backend": (str, None),
    "log-level": (str, "info"),
    "dtype": (str, "auto"),
    "chunked-prefill-size": (int, None),
    "enable-metrics": (bool, False),
    "watchdog-timeout": (float, None),
}
ALL_OPTIONS = {**OPTIONS, **IGNORED_OPTIONS}
SPEC_ALGORITHMS = ("DFLASH", "EAGLE", "EAGLE3", "NEXTN")

DEFAULT_BLOCK = 8
# SGLang 0.5.23 resolves an unset max-running-requests to 48 for every speculative algorithm the
# stand-in accepts (sglang/srt/arg_groups/speculative_hook.py: _handle_dflash for DFLASH,
# _handle_eagle_family for EAGLE/EAGLE3 and NEXTN, its EAGLE alias), with this warning.
SPEC_MAX_RUNNING_REQUESTS = 48
SPEC_MAX_RUNNING_WARNING = ("Max running requests is reset to 48 for speculative decoding. You can override this "
                            "by explicitly setting --max-running-requests.")
# Without speculative decoding SGLang leaves the option unset (/server_info says null) and its memory
# pool sizes the admission: KVCacheConfigurator.resolve_max_num_reqs, min(clamp(token capacity /
# context length * 512, 2048, 4096), token capacity // 2), reported as internal_states[0]
# effective_max_running_requests_per_dp. The stand-in has no KV pool: it takes the floor, 2048.
AUTO_MAX_RUNNING_REQUESTS = 2048
MAX_BODY = 16 << 20
SHM_BYTES = 1 << 20
REQUEST_TIMEOUT = 120.0  # a client that stops sending is dropped, never waited on forever
STOP_JOIN_SECONDS = 1.5  # the HTTP server's own stop, once nothing is left to drain
# SGLang 0.5.23's drain cadence (srt/managers/tokenizer_manager.py, TokenizerManager.sigterm_watchdog):
# the watchdog looks at the SIGTERM flag every 5 s (`await asyncio.sleep(5)`), then logs the remaining
# requests and sleeps 5 s again until none remain. Not a knob: a restart takes up to 5 s longer when
# idle, and the drained requests' time plus up to 5 s when busy, as with SGLang.
DRAIN_POLL_SECONDS = 5.0
# SGLang 0.5.23's /health and /health_generate (srt/entrypoints/http_server.py, health_generate): one
# 1-token generation, polled every 1 s (`await asyncio.sleep(1)`) for HEALTH_CHECK_TIMEOUT seconds
# (env SGLANG_HEALTH_CHECK_TIMEOUT, default 20); any output from the scheduler since the check began
# counts. The first look comes after 1 s, so a healthy answer takes about 1 s, as with SGLang.
HEALTH_POLL_SECONDS = 1.0

# Deterministic output "tokens": words from a fixed vocabulary.
VOCAB = (
    "the a model server token draft verify accept block step cache shard tensor weight layer "
    "expert router lab stand in fleet gpu node rank batch stream ready health config commit "
    "revision hub mirror snapshot loader index header offset byte check sum hash quick brown "
    "fox jumps over lazy dog alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
).split()


class ConfigError(Exception):
    """Bad configuration: exit 2 (as argparse)."""


class StartError(Exception):
    """Start-up failure: exit 1."""


def log(msg: str) -> None:
    print(LOG_PREFIX + msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the accept model (pure)

def accept_probability(block: int, mean: float) -> float:
    """p of the Binomial(block - 1, p) extra tokens so that E[k] = mean (before truncation)."""
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    if not 1.0 <= mean <= block:
        raise ValueError(f"accept mean {mean} must lie in [1, {block}]")
    return 0.0 if block == 1 else (mean - 1.0) / (block - 1)


def _k_distribution(block: int, mean: float) -> list[float]:
    """P(k) for k = 0..block (k = 0 has probability 0): k = 1 + Binomial(block - 1, p)."""
    p = accept_probability(block, mean)
    n = block - 1
    dist = [0.0] * (block + 1)
    for extra in range(n + 1):
        dist[1 + extra] = comb(n, extra) * p ** extra * (1.0 - p) ** (n - extra)
    return dist


def expected_verify_steps(block: int, mean: float, max_new_tokens: int) -> float:
    """E[number of verify steps] to emit exactly max_new_tokens tokens, truncation included."""
    dist = _k_distribution(block, mean)
    steps = [0.0] * (max_new_tokens + 1)
    for n in range(1, max_new_tokens + 1):
        steps[n] = 1.0 + sum(pk * steps[max(n - k, 0)] for k, pk in enumerate(dist) if pk)
    return steps[max_new_tokens]


def predicted_accept_mean(block: int, mean: float, max_new_tokens: int) -> float:
    """What completion_tokens / spec_verify_ct summed over many requests of max_new_tokens each
    converges to (the figure /server_info reports): N / E[steps(N)]. 1.0 for N = 0."""
    if max_new_tokens <= 0:
        return 1.0
    return max_new_tokens / expected_verify_steps(block, mean, max_new_tokens)


def predicted_speedup(block: int, mean: float, max_new_tokens: int, spec_cost: float) -> float:
    """Speculative vs autoregressive throughput at equal concurrency (same requests)."""
    return predicted_accept_mean(block, mean, max_new_tokens) / spec_cost


def draw_step_tokens(rng: random.Random, block: int, p: float, left: int) -> int:
    """One speculative verify step: 1 + Binomial(block - 1, p), truncated to `left`."""
    k = 1 + sum(1 for _draft in range(block - 1) if rng.random() < p)
    return min(k, left)


# ---------------------------------------------------------------- configuration

def _env_float(name: str, default: float, low: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if low is not None and value < low:
        raise ConfigError(f"{name}={raw!r} must be >= {low}")
    return value


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None


def _unrecognized(key: str) -> ConfigError:
    hint = ""
    if "_" in key:
        hint = (f" (SGLang 0.5.23 turns each config key into --<key> verbatim: write it in dash "
                f"form, {key.replace('_', '-')})")
    return ConfigError(f"unrecognized arguments: --{key}{hint}")


def _coerce(key: str, value, typ):
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(f"argument --{key}: expected a boolean, got {value!r}")
    if value is None:
        return None
    if isinstance(value, bool) or isinstance(value, (list, dict)):
        raise ConfigError(f"argument --{key}: invalid {typ.__name__} value: {value!r}")
    try:
        return typ(value)
    except (TypeError, ValueError):
        raise ConfigError(f"argument --{key}: invalid {typ.__name__} value: {value!r}") from None


def _parse_cli(argv: list[str]) -> tuple[str | None, dict]:
    """--config FILE plus `--key value` / `--key=value` / `--flag` overrides."""
    config_file = None
    overrides: dict = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or arg == "--":
            raise ConfigError(f"unrecognized arguments: {arg}")
        key, eq, value = arg[2:].partition("=")
        if key not in ALL_OPTIONS and key != "config":
            raise _unrecognized(key)
        if not eq:
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value = argv[i + 1]
                i += 1
            elif ALL_OPTIONS.get(key, (str,))[0] is bool:
                value = True
            else:
                raise ConfigError(f"argument --{key}: expected one argument")
        if key == "config":
            config_file = value
        else:
            overrides[key] = value
        i += 1
    return config_file, overrides


def _take_ready_file(argv: list[str]) -> tuple[str | None, list[str]]:
    """(--ready-file PATH, the other arguments): the lab's option never reaches the SGLang parser."""
    rest: list[str] = []
    path = None
    args = iter(argv)
    for arg in args:
        if arg == "--ready-file":
            path = next(args, None)
            if path is None or path.startswith("--"):
                raise ConfigError("argument --ready-file: expected one argument")
        elif arg.startswith("--ready-file="):
            path = arg.partition("=")[2]
        else:
            rest.append(arg)
    return path, rest


def announce(path: str | None, state: State, status: str) -> None:
    """The ready JSON (the format of tests/lab/ready.py, which this file cannot import: it is baked
    alone into the lab image), written to a temporary name and renamed over PATH."""
    if not path:
        return
    host, port = state.config["host"], state.config["port"]
    info = {"state": status, "host": host, "port": port, "rank": state.rank, "pid": os.getpid(),
            "url": f"http://{'[' + host + ']' if ':' in host else host}:{port}"}
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(info, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _read_yaml(path: str) -> dict:
    import yaml  # noqa: PLC0415 (only needed with --config)

    if not path.endswith((".yaml", ".yml")):
        raise ConfigError(f"--config {path}: the config file must end in .yaml")
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as e:
        raise ConfigError(f"--config {path}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {path}: not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: must be a mapping of options")
    return data


def load_config(argv: list[str]) -> dict:
    """Merged options, dash form, every known key present (defaults filled in)."""
    config_file, overrides = _parse_cli(argv)
    merged: dict = {}
    if config_file is not None:
        for key, value in _read_yaml(config_file).items():
            key = str(key)
            if key not in ALL_OPTIONS:
                raise _unrecognized(key)
            merged[key] = value
    merged.update(overrides)  # the command line wins, as in SGLang
    config = {}
    for key, (typ, default) in ALL_OPTIONS.items():
        config[key] = _coerce(key, merged[key], typ) if key in merged else default
    if not config["model-path"]:
        raise ConfigError("the following arguments are required: --model-path")
    algo = config["speculative-algorithm"]
    if algo is not None:
        if algo.upper() not in SPEC_ALGORITHMS:
            raise ConfigError(f"argument --speculative-algorithm: invalid choice: {algo!r} "
                              f"(choose from {', '.join(SPEC_ALGORITHMS)})")
        config["speculative-algorithm"] = algo.upper()
    if not 0 < config["port"] < 65536:
        raise ConfigError(f"argument --port: {config['port']} is not a TCP port")
    if config["nnodes"] < 1 or not 0 <= config["node-rank"] < config["nnodes"]:
        raise ConfigError(f"--node-rank {config['node-rank']} must lie in [0, nnodes "
                          f"{config['nnodes']})")
    ndt = config["speculative-num-draft-tokens"]
    if ndt is not None and ndt < 1:
        raise ConfigError(f"argument --speculative-num-draft-tokens: {ndt} must be >= 1")
    if algo is not None and config["max-running-requests"] is None:
        config["max-running-requests"] = SPEC_MAX_RUNNING_REQUESTS
        log("WARNING " + SPEC_MAX_RUNNING_WARNING)
    if config["decode-log-interval"] < 1:
        raise ConfigError(f"argument --decode-log-interval: {config['decode-log-interval']} must be >= 1")
    if config["served-model-name"] is None:
        config["served-model-name"] = config["model-path"]
    return config


class Model:
    """The delay/accept knobs in effect (env), checked at start-up."""

    def __init__(self, config: dict, drafter_block: int | None):
        self.speculative = config["speculative-algorithm"] is not None
        self.step_ms = _env_float("GPUFLEET_STANDIN_STEP_MS", 20.0, low=0.0)
        self.spec_cost = _env_float("GPUFLEET_STANDIN_SPEC_COST", 1.2, low=0.0)
        self.accept_mean = _env_float("GPUFLEET_STANDIN_ACCEPT_MEAN", 3.5)
        self.seed = _env_int("GPUFLEET_STANDIN_SEED", 0)
        self.load_seconds = _env_float("GPUFLEET_STANDIN_LOAD_SECONDS", 2.0, low=0.0)
        self.never_ready = os.environ.get("GPUFLEET_STANDIN_NEVER_READY", "") == "1"
        self.block = config["speculative-num-draft-tokens"] or drafter_block or DEFAULT_BLOCK
        self.p = 0.0
        if self.speculative:
            if self.spec_cost <= 0:
                raise ConfigError("GPUFLEET_STANDIN_SPEC_COST must be > 0")
            try:
                self.p = accept_probability(self.block, self.accept_mean)
            except ValueError as e:
                raise ConfigError(f"GPUFLEET_STANDIN_ACCEPT_MEAN: {e}") from None

    @property
    def step_seconds(self) -> float:
        return self.step_ms * (self.spec_cost if self.speculative else 1.0) / 1000.0

    def describe(self) -> dict:
        return {"step_ms": self.step_ms, "spec_cost": self.spec_cost if self.speculative else None,
                "accept_mean": self.accept_mean if self.speculative else None,
                "block": self.block if self.speculative else None, "seed": self.seed,
                "speculative": self.speculative,
                "note": "lab stand-in: these figures say nothing about GPU performance"}


# ---------------------------------------------------------------- start-up

def _home() -> str:
    return os.path.expanduser("~")


def _user() -> str:
    try:
        import pwd  # noqa: PLC0415

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return os.environ.get("USER", str(os.getuid()))


def cache_dirs() -> dict[str, str]:
    """env var -> directory, with the defaults a real start (transformers/triton/torch) uses."""
    hf_home = os.environ.get("HF_HOME") or os.path.join(_home(), ".cache", "huggingface")
    return {
        "HF_MODULES_CACHE": os.environ.get("HF_MODULES_CACHE") or os.path.join(hf_home, "modules"),
        "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR") or os.path.join(_home(), ".triton", "cache"),
        "TORCHINDUCTOR_CACHE_DIR": (os.environ.get("TORCHINDUCTOR_CACHE_DIR")
                                    or os.path.join("/tmp", f"torchinductor_{_user()}")),
    }


def _fail_write(var: str, path: str, err: OSError) -> StartError:
    return StartError(f"cannot write to {var} cache dir {path}: {err.strerror or err} "
                      f"(set {var} to a writable directory, or make it writable for this user)")


def write_caches(config: dict) -> None:
    dirs = cache_dirs()
    pid = os.getpid()
    if config["trust-remote-code"]:
        var, base = "HF_MODULES_CACHE", dirs["HF_MODULES_CACHE"]
        models = [config["model-path"]]
        if config["speculative-draft-model-path"]:
            models.append(config["speculative-draft-model-path"])
        try:
            mods = Path(base) / "transformers_modules"
            mods.mkdir(parents=True, exist_ok=True)
            (mods / "__init__.py").touch()
            for model_dir in models:
                sources = sorted(Path(model_dir).glob("*.py"))
                if not sources:
                    continue
                dest = mods / os.path.basename(os.path.normpath(model_dir))
                dest.mkdir(exist_ok=True)
                for src in sources:
                    shutil.copyfile(src, dest / src.name)
                    log(f"wrote {dest / src.name}")
        except OSError as e:
            raise _fail_write(var, base, e) from None
    for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        path = Path(dirs[var]) / f"gpufleet-standin-{pid}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"gpufleet lab SGLang stand-in, pid {pid}\n")
        except OSError as e:
            raise _fail_write(var, dirs[var], e) from None
        log(f"wrote {path}")
    shm = Path("/dev/shm") / f"gpufleet-standin-{pid}"
    try:
        with open(shm, "wb") as fh:
            fh.write(b"\0" * SHM_BYTES)
        log(f"wrote {shm} (1 MiB, removed again)")
    except OSError as e:
        raise StartError(f"cannot write 1 MiB to /dev/shm ({shm}): {e.strerror or e}") from None
    finally:
        try:
            shm.unlink()
        except OSError:
            pass


def _numpy_readable(dtype: str) -> bool:
    return dtype not in ("BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2")


def _read_raw(path: Path, name: str) -> None:
    """Read a tensor numpy cannot hold (BF16, FP8) byte for byte, from the header's offsets."""
    with open(path, "rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(size))
        begin, end = header[name]["data_offsets"]
        fh.seek(8 + size + begin)
        left = end - begin
        while left:
            chunk = fh.read(min(left, 8 << 20))
            if not chunk:
                raise OSError(f"tensor {name} is truncated")
            left -= len(chunk)


def open_model(model_dir: str, role: str, stop: threading.Event) -> dict:
    """Open a model as a loader would; returns its config.json. Raises StartError naming the file."""
    from safetensors import safe_open  # noqa: PLC0415 (the SGLang venv has it; kept local for --help)

    root = Path(model_dir)
    if not root.is_dir():
        raise StartError(f"{role} {model_dir}: not a directory")
    cfg_file = root / "config.json"
    try:
        model_config = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as e:
        raise StartError(f"{role} {cfg_file}: cannot read config.json: {e}") from None
    index_file = root / "model.safetensors.index.json"
    if index_file.exists():
        try:
            weight_map = json.loads(index_file.read_text())["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError("weight_map is not a mapping")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise StartError(f"{role} {index_file}: bad index: {e}") from None
        shards: dict[str, set] = {}
        for tensor, shard in weight_map.items():
            shards.setdefault(shard, set()).add(tensor)
    elif (root / "model.safetensors").exists():
        shards = {"model.safetensors": set()}
    else:
        raise StartError(f"{role} {model_dir}: neither model.safetensors.index.json nor "
                         "model.safetensors")
    tensors = 0
    nbytes = 0
    for shard in sorted(shards):
        path = root / shard
        try:
            with safe_open(str(path), framework="numpy") as fh:
                names = set(fh.keys())
                missing = sorted(shards[shard] - names)
                if missing:
                    raise StartError(f"{role} {path}: tensor {missing[0]} listed in the index is "
                                     f"missing from the shard ({len(missing)} missing)")
                for name in sorted(names):
                    if stop.is_set():
                        return model_config
                    dtype = fh.get_slice(name).get_dtype()
                    if _numpy_readable(dtype):
                        nbytes += fh.get_tensor(name).nbytes
                    else:
                        _read_raw(path, name)
                    tensors += 1
        except StartError:
            raise
        except Exception as e:  # safetensors raises its own error types; any of them = bad shard
            raise StartError(f"{role} {path}: cannot load shard: {type(e).__name__}: {e}") from None
    log(f"opened {role} {model_dir}: {len(shards)} shard(s), {tensors} tensors")
    return model_config


# ---------------------------------------------------------------- serving

class State:
    """Counters as SGLang 0.5.23's scheduler keeps them (scheduler_components/metrics_reporter.py).

    SGLang folds its per-interval speculative counters into the lifetime ones only every
    `decode-log-interval` decode iterations (a decode iteration steps every running request once),
    and /server_info's avg_spec_accept_length is lifetime accepted tokens / lifetime verify forwards,
    absent until the first fold; /flush_cache resets all of it. The stand-in has no batches: each
    verify step of a request counts 1/running of an iteration (running = requests decoding then), so
    c requests in step count one iteration per round, as SGLang does, and a lone request exactly.
    """

    def __init__(self, config: dict, model: Model):
        self.config = config
        self.model = model
        self.rank = config["node-rank"]
        self.ready = threading.Event()  # SGLang's ServerStatus.Up after warmup (set once, never cleared)
        self.unhealthy = False  # ServerStatus.UnHealthy: a /health generation timed out (until one succeeds)
        self.draining = threading.Event()  # TokenizerManager.gracefully_exit: SIGTERM received
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.requests = 0
        # TokenizerManager.rid_to_state: every /generate and chat request from arrival until its answer
        # is finished (arrival number -> rid); the drain waits until it is empty.
        self.inflight: dict[int, str] = {}
        self.last_receive = 0.0  # TokenizerManager.last_receive_tstamp: the scheduler's last output
        self.launch_command = ""
        self.health_timeout = _env_float("SGLANG_HEALTH_CHECK_TIMEOUT", 20.0, low=0.0)
        self.stall_file = os.environ.get("GPUFLEET_STANDIN_STALL_FILE") or None
        self.request_log = os.environ.get("GPUFLEET_STANDIN_REQUEST_LOG") or None
        self.running = 0
        self.waiting = 0
        self.flushing = False
        # What the scheduler admits at once (SGLang: requested_per_worker = max(1, value // dp), one DP
        # rank here); more requests wait in its queue, and so they do here.
        resolved = config["max-running-requests"]
        self.max_running = max(1, resolved) if resolved is not None else AUTO_MAX_RUNNING_REQUESTS
        self.interval = config["decode-log-interval"]
        self.last_gen_throughput = 0.0
        self.last_log_tic = time.monotonic()
        self._reset_metrics()

    def _reset_metrics(self) -> None:
        # SGLang's MetricsReporter.reset_metrics(), called by a successful flush_cache; it leaves
        # last_gen_throughput as it was.
        self.iterations = Fraction(0)
        self.next_fold = Fraction(self.interval)
        self.gen_tokens = 0
        self.spec_tokens = self.spec_forwards = 0
        self.spec_total_tokens = self.spec_total_forwards = 0

    def arrive(self, path: str, stream: bool, request_id: str | None) -> tuple[int, str]:
        """A /generate or chat request that reached the model: its number (the seed of its draws, in
        arrival order) and rid; it counts as in flight (the drain waits for it) until leave()."""
        with self.lock:
            number = self.requests
            self.requests += 1
            rid = hashlib.sha256(f"{self.model.seed}:{number}".encode()).hexdigest()[:32]
            self.inflight[number] = rid
        self.log_request(path, rid, stream, request_id)
        return number, rid

    def leave(self, number: int) -> None:
        with self.lock:
            self.inflight.pop(number, None)

    def log_request(self, path: str, rid: str | None, stream: bool, request_id: str | None) -> None:
        """The lab's request log (GPUFLEET_STANDIN_REQUEST_LOG): one JSON line per request at its
        arrival, written with one write() on an O_APPEND descriptor, so lines never interleave."""
        if not self.request_log:
            return
        line = json.dumps({"t": time.time(), "path": path, "rid": rid, "stream": stream,
                           "request_id": request_id}, sort_keys=True) + "\n"
        fd = os.open(self.request_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def begin(self) -> None:
        """A request starts decoding once the scheduler admits it (fewer than max_running running);
        until then it waits in the queue (num_waiting_reqs)."""
        with self.idle:
            self.waiting += 1
            try:
                self.idle.wait_for(lambda: self.running < self.max_running)
            finally:
                self.waiting -= 1
            self.running += 1

    def end(self) -> None:
        with self.lock:
            self.running -= 1
            self.idle.notify_all()  # an admission slot, or idle for a flush

    def wait_unstalled(self) -> None:
        """The lab's stall fault (GPUFLEET_STANDIN_STALL_FILE): while that file exists the scheduler
        produces nothing (a hung GPU); requests and /health generations wait."""
        while self.stall_file and os.path.exists(self.stall_file):
            time.sleep(0.02)

    def healthy(self) -> bool:
        """TokenizerManager.is_healthy(): up, not unhealthy, not draining (/ready answers this)."""
        return self.ready.is_set() and not self.unhealthy and not self.draining.is_set()

    def loads(self) -> dict:
        """One LoadSnapshot.to_dict() (srt/managers/load_snapshot.py), dp rank 0, with the counters the
        stand-in has (SGLang's scheduler publishes them every iteration; the stand-in answers live)."""
        with self.lock:
            running, waiting = self.running, self.waiting
            throughput = self.last_gen_throughput
        return {"timestamp": time.time(), "dp_rank": 0, "num_running_reqs": running,
                "num_waiting_reqs": waiting, "num_waiting_uncached_tokens": 0, "num_used_tokens": 0,
                "num_total_tokens": 0, "num_active_tokens": 0, "num_prealloc_ready_tokens": 0,
                "max_total_num_tokens": 0, "max_running_requests": self.max_running,
                "token_usage": 0.0, "gen_throughput": throughput, "cache_hit_rate": 0.0,
                "utilization": min(1.0, running / self.max_running), "total_prefill_uncached_tokens": 0,
                "total_prefill_busy_us": 0}

    def step(self, tokens: int) -> None:
        """One verify step of one request that emitted `tokens`."""
        with self.lock:
            self.last_receive = time.time()
            self.iterations += Fraction(1, max(self.running, 1))
            self.gen_tokens += tokens
            if self.model.speculative:
                self.spec_tokens += tokens
                self.spec_forwards += 1
            if self.iterations >= self.next_fold:
                self.next_fold += self.interval
                self._fold()

    def _fold(self) -> None:
        now = time.monotonic()
        gap = now - self.last_log_tic
        self.last_log_tic = now
        if gap > 0:
            self.last_gen_throughput = self.gen_tokens / gap
        self.gen_tokens = 0
        self.spec_total_tokens += self.spec_tokens
        self.spec_total_forwards += self.spec_forwards
        self.spec_tokens = self.spec_forwards = 0
        if self.model.speculative and self.spec_total_forwards:
            log(f"decode log: accept len {self.spec_total_tokens / self.spec_total_forwards:.2f} "
                f"(lifetime), #running-req: {self.running}")

    def flush(self, timeout: float) -> tuple[bool, str]:
        """(success, message) as SGLang's scheduler flush: only when no request is running; with
        timeout > 0 it waits up to that long for the server to go idle."""
        with self.idle:
            if self.flushing:
                return False, "Another flush_cache is already in progress."
            if (self.running or self.waiting) and timeout > 0:
                self.flushing = True
                try:
                    self.idle.wait_for(lambda: not (self.running or self.waiting), timeout)
                finally:
                    self.flushing = False
                if self.running or self.waiting:
                    return False, "Timed out waiting for idle state."
            if self.running or self.waiting:
                log(f"Cache not flushed because there are pending requests. #queue-req: {self.waiting}, "
                    f"#running-req: {self.running}")
                return False, ""
            self._reset_metrics()
            log("Cache flushed successfully!")
            return True, ""

    def server_args(self) -> dict:
        """ServerArgs.resolved_dict() for the options the stand-in has: every value as resolved,
        api_key and admin_api_key INCLUDED (SGLang 0.5.23 redacts only the watermark secrets), plus
        the resolved speculative_num_draft_tokens (speculative_hook.py _handle_dflash: the drafter's
        block size) and max_running_requests (48 with speculative decoding)."""
        args = {key.replace("-", "_"): value for key, value in self.config.items()}
        if self.model.speculative:
            args["speculative_num_draft_tokens"] = self.model.block
        return args

    def server_info(self) -> dict:
        """/server_info as SGLang 0.5.23 builds it (http_server.py server_info + utils/common.py
        build_server_info): the resolved server args, keys included, and launch_command."""
        info = self.server_args()
        info["launch_command"] = self.launch_command
        info["version"] = VERSION
        info["standin"] = True  # the lab's one marker (docs/lab.md): reports label stand-in figures
        with self.lock:
            internal = {"effective_max_running_requests_per_dp": self.max_running,
                        "last_gen_throughput": self.last_gen_throughput}
            if self.model.speculative and self.spec_total_forwards > 0:
                internal["avg_spec_accept_length"] = self.spec_total_tokens / self.spec_total_forwards
        info["internal_states"] = [internal]
        return info


class BadRequest(Exception):
    pass


def _check_sampling(max_new, temp, ignore_eos, *, prefix: str) -> None:
    if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 0:
        raise BadRequest(f"{prefix}max_new_tokens must be an integer >= 0")
    if temp is not None and (isinstance(temp, bool) or not isinstance(temp, (int, float)) or temp < 0):
        raise BadRequest(f"{prefix}temperature must be a number >= 0")
    if not isinstance(ignore_eos, bool):
        raise BadRequest(f"{prefix}ignore_eos must be a boolean")


def _json_object(body: bytes) -> dict:
    try:
        req = json.loads(body or b"null")
    except ValueError:
        raise BadRequest("body is not JSON") from None
    if not isinstance(req, dict):
        raise BadRequest("body must be a JSON object")
    return req


def parse_generate(body: bytes) -> dict:
    req = _json_object(body)
    text, ids = req.get("text"), req.get("input_ids")
    if text is not None:
        if not isinstance(text, str):
            raise BadRequest("text must be a string (batches are not supported by the stand-in)")
        prompt_tokens = len(text.split())
    elif ids is not None:
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                for i in ids):
            raise BadRequest("input_ids must be a list of integers")
        prompt_tokens = len(ids)
    else:
        raise BadRequest("give text or input_ids")
    sp = req.get("sampling_params") or {}
    if not isinstance(sp, dict):
        raise BadRequest("sampling_params must be an object")
    max_new = sp.get("max_new_tokens", 128)
    if max_new is None:
        max_new = 128
    _check_sampling(max_new, sp.get("temperature", 1.0), sp.get("ignore_eos", False),
                    prefix="sampling_params.")
    stream = req.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("stream must be a boolean")
    return {"prompt_tokens": prompt_tokens, "max_new_tokens": max_new, "stream": stream}


def render_chat(messages) -> str:
    """The stand-in's chat template (ChatML-like; a real server applies the model's own template):
    prompt_tokens of a chat request are the words of this text."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    parts = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest("each message must be an object with a role")
        content = message.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise BadRequest("message content must be a string (parts are not supported by the stand-in)")
        parts.append(f"<|im_start|>{message['role']}\n{content}<|im_end|>")
    parts.append("<|im_start|>assistant\n")
    return "\n".join(parts)


def parse_chat(body: bytes) -> dict:
    req = _json_object(body)
    prompt_tokens = len(render_chat(req.get("messages")).split())
    max_new = req.get("max_completion_tokens")
    if max_new is None:
        max_new = req.get("max_tokens")
    if max_new is None:
        max_new = 128
    _check_sampling(max_new, req.get("temperature"), req.get("ignore_eos", False), prefix="")
    flags = {}
    for key in ("stream", "return_spec_tokens_details", "return_meta_info"):
        flags[key] = req.get(key, False)
        if not isinstance(flags[key], bool):
            raise BadRequest(f"{key} must be a boolean")
    options = req.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("stream_options must be an object")
    model = req.get("model", "default")
    if not isinstance(model, str):
        raise BadRequest("model must be a string")
    return {"prompt_tokens": prompt_tokens, "max_new_tokens": max_new, "model": model,
            "include_usage": options.get("include_usage") is True, **flags}


class Generation:
    """One request's decode: verify steps paced by the delay model, tokens drawn by the accept model."""

    def __init__(self, state: State, prompt_tokens: int, max_new_tokens: int, arrival: tuple[int, str]):
        self.state = state
        self.model = state.model
        self.prompt_tokens = prompt_tokens
        self.max_new = max_new_tokens
        self.number, self.rid = arrival
        state.begin()
        self.rng = random.Random(f"{self.model.seed}:{self.number}")
        self.started = time.monotonic()
        self.ids: list[int] = []
        self.verify_ct = 0
        self.correct_drafts = 0
        self.done = False
        self._ended = False

    @property
    def text(self) -> str:
        return " ".join(VOCAB[i] for i in self.ids)

    def close(self) -> None:
        """Leave the running set (once; later calls do nothing)."""
        if not self._ended:
            self._ended = True
            self.state.end()

    def steps(self):
        """Yields after every verify step (and once at the end when there is none). The request
        leaves the running set before the last yield, as SGLang finishes a request in its scheduler
        before the answer goes out: a /flush_cache right after the answer finds the server idle."""
        deadline = self.started
        try:
            while len(self.ids) < self.max_new:
                if self.state.stall_file:
                    self.state.wait_unstalled()
                    deadline = max(deadline, time.monotonic())
                deadline += self.model.step_seconds
                delay = deadline - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                left = self.max_new - len(self.ids)
                k = (draw_step_tokens(self.rng, self.model.block, self.model.p, left)
                     if self.model.speculative else 1)
                for _token in range(k):
                    self.ids.append((self.number * 7919 + len(self.ids) * 31) % len(VOCAB))
                self.verify_ct += 1
                self.correct_drafts += k - 1
                self.state.step(k)
                if len(self.ids) >= self.max_new:
                    break
                yield
            self.done = True
            self.close()
            yield
        finally:
            self.close()

    def meta_info(self) -> dict:
        """meta_info as SGLang's TokenizerManager builds it; e2e_latency and the spec_* figures
        only in the last answer, the spec_* ones only with speculative decoding."""
        n = len(self.ids)
        meta = {"id": self.rid, "finish_reason": {"type": "length", "length": n} if self.done else None,
                "prompt_tokens": self.prompt_tokens, "weight_version": WEIGHT_VERSION,
                "num_retractions": 0, "reasoning_tokens": 0, "completion_tokens": n, "cached_tokens": 0}
        if self.done:
            meta["e2e_latency"] = time.monotonic() - self.started
            proposed = self.verify_ct * (self.model.block - 1)
            if self.model.speculative and self.verify_ct and proposed:
                meta.update(spec_accept_rate=self.correct_drafts / proposed,
                            spec_accept_length=n / self.verify_ct,
                            spec_num_correct_drafts=self.correct_drafts,
                            spec_num_proposed_drafts=proposed, spec_verify_ct=self.verify_ct)
        return meta

    def spec_tokens_details(self) -> dict | None:
        """SpecTokensDetails of SGLang's OpenAI protocol (sglext), from the final meta_info."""
        meta = self.meta_info()
        if "spec_verify_ct" not in meta:
            return None
        return {"spec_accept_rate": meta["spec_accept_rate"], "spec_accept_length": meta["spec_accept_length"],
                "spec_cap_length": 0.0, "spec_block_accept_length": 0.0,
                "spec_num_correct_drafts": meta["spec_num_correct_drafts"],
                "spec_num_proposed_drafts": meta["spec_num_proposed_drafts"],
                "spec_verify_ct": meta["spec_verify_ct"], "spec_correct_drafts_histogram": [],
                "spec_cap_lens_histogram": []}

    def usage(self) -> dict:
        n = len(self.ids)
        return {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + n,
                "completion_tokens": n, "prompt_tokens_details": None, "reasoning_tokens": 0,
                "completion_tokens_details": None}


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "gpufleet-lab-sglang-standin/" + VERSION
    timeout = REQUEST_TIMEOUT
    state: State  # set on the subclass made by serve()

    def log_message(self, format, *args):  # noqa: A002 (BaseHTTPRequestHandler's signature)
        # Per-request lines would flood journald during benchmarks; the request line never holds
        # the API key (headers are not logged), so debug logging is safe.
        if self.state.config["log-level"] == "debug":
            log("http " + format % args)

    # -- helpers
    def _send(self, code: int, data: bytes, content_type: str | None) -> None:
        self.send_response(code)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json(self, code: int, obj) -> None:
        self._send(code, json.dumps(obj).encode(), "application/json")

    def _empty(self, code: int) -> None:
        """SGLang's bare `Response(status_code=...)`: no body, no content type."""
        self._send(code, b"", None)

    def _sse_start(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

    def _sse(self, obj) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def _authorized(self, path: str) -> bool:
        # SGLang 0.5.23's decide_request_auth (sglang/srt/utils/auth.py): /health*, /ready*, /metrics* are
        # open; an ADMIN_OPTIONAL route (here /flush_cache) takes only the admin-api-key when one is set,
        # else the api-key, else nothing; every other route the api-key when one is set.
        if path.startswith(("/health", "/ready", "/metrics")):
            return True
        key = self.state.config["api-key"]
        if path in ADMIN_OPTIONAL_PATHS and self.state.config["admin-api-key"]:
            key = self.state.config["admin-api-key"]
        if not key:
            return True
        got = self.headers.get("Authorization", "")
        scheme, _sep, token = got.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), key.encode())

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if not self._authorized(path):
                self._json(401, {"error": "Unauthorized"})
                return
            st = self.state
            if st.rank > 0:
                # Ranks > 0 serve no API, only SGLang's dummy health check server
                # (utils/common.py launch_dummy_health_check_server), started once the schedulers
                # are ready (entrypoints/engine.py: wait_for_ready() first): 200 whenever it listens.
                if method == "GET" and path in ("/health", "/health_generate", "/ping"):
                    self._empty(200)
                else:
                    self._json(404, {"detail": "Not Found"})
                return
            handler = ROUTES.get((method, path))
            if handler is None:
                if any(p == path for _method, p in ROUTES):
                    self._json(405, {"detail": "Method Not Allowed"})
                else:
                    self._json(404, {"detail": "Not Found"})
                return
            handler(self)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self):  # noqa: N802
        self._route("GET")

    def do_POST(self):  # noqa: N802
        self._route("POST")

    def do_PUT(self):  # noqa: N802
        self._route("PUT")

    def _read_body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            raise BadRequest("bad Content-Length") from None
        if length < 0 or length > MAX_BODY:
            raise BadRequest(f"body must be 0..{MAX_BODY} bytes")
        return self.rfile.read(length)

    def _query(self) -> dict:
        return dict(urllib.parse.parse_qsl(self.path.partition("?")[2]))

    # -- routes
    def health_generate(self):
        """/health and /health_generate, one handler in SGLang 0.5.23 (http_server.py
        health_generate; SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION defaults to true, so /health
        generates too): 503 while draining or starting; else one 1-token generation through the
        scheduler, and 200 as soon as the scheduler produced anything since the check began (looked
        at every second), or 503 after SGLANG_HEALTH_CHECK_TIMEOUT seconds, marking the server
        unhealthy (a later successful check marks it up again)."""
        st = self.state
        if st.draining.is_set():
            log("Health check request received during shutdown. Returning 503.")
            self._empty(503)
            return
        if not st.ready.is_set():
            self._empty(503)
            return
        tic = time.time()
        threading.Thread(target=_health_generation, args=(st,), name="health-gen", daemon=True).start()
        while time.time() < tic + st.health_timeout:
            time.sleep(HEALTH_POLL_SECONDS)
            if st.last_receive > tic:
                st.unhealthy = False
                self._empty(200)
                return
        log(f"Health check failed. Server couldn't get a response from detokenizer for last "
            f"{st.health_timeout:g} seconds. tic start time: {time.strftime('%H:%M:%S', time.localtime(tic))}. "
            f"last_heartbeat time: {time.strftime('%H:%M:%S', time.localtime(st.last_receive))}")
        st.unhealthy = True
        self._empty(503)

    def loads(self):
        """GET /v1/loads (srt/entrypoints/v1_loads.py get_loads): one dp rank, every section absent
        (the stand-in has no memory/spec/lora/disagg/queue sections to report)."""
        query = self._query()
        if query.get("format") == "prometheus":
            load = self.state.loads()
            dp_rank = load.pop("dp_rank")
            lines = []
            for key, value in load.items():
                lines += [f"# TYPE sglang_{key} gauge", f'sglang_{key}{{dp_rank="{dp_rank}"}} {value}']
            self._send(200, ("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4; charset=utf-8")
            return
        loads = [self.state.loads()]
        if "dp_rank" in query and query["dp_rank"] != "0":
            loads = []
        self._json(200, {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
                         "version": VERSION, "accelerator": None, "num_accelerators": self.state.config["tp-size"],
                         "loads": loads})

    def model_info(self):
        c = self.state.config
        self._json(200, {"model_path": c["model-path"], "tokenizer_path": c["model-path"],
                         "is_generation": True, "served_model_name": c["served-model-name"],
                         "weight_version": WEIGHT_VERSION, "standin": True})

    def server_info(self):
        self._json(200, self.state.server_info())

    def flush_cache(self):
        try:
            timeout = float(self._query().get("timeout", 0.0))
        except ValueError:
            timeout = -1.0
        if not timeout >= 0:  # NaN as well
            self._json(422, {"detail": "timeout: Input should be greater than or equal to 0"})
            return
        ok, message = self.state.flush(timeout)
        if ok:
            self._send(200, FLUSH_OK.encode(), None)
        else:
            self._send(400, (message or "Flush cache failed.\n").encode(), None)

    def _admit(self, parse):
        try:
            req = parse(self._read_body())
        except BadRequest as e:
            self._json(400, {"error": str(e)})
            return None
        request_id = self.headers.get("X-Request-Id")
        path = self.path.split("?", 1)[0]
        if not self.state.ready.is_set():
            self.state.log_request(path, None, req["stream"], request_id)
            self._empty(503)
            return None
        # Draining (SIGTERM received) changes nothing here, as in SGLang 0.5.23: new requests are
        # still accepted and served; only /health and /ready answer 503.
        req["arrival"] = self.state.arrive(path, req["stream"], request_id)
        return req

    def generate(self):
        req = self._admit(parse_generate)
        if req is None:
            return
        try:
            gen = Generation(self.state, req["prompt_tokens"], req["max_new_tokens"], req["arrival"])
            try:
                self._generate(gen, req["stream"])
            finally:
                gen.close()  # a client gone mid-answer still leaves the running set at once
        finally:
            self.state.leave(req["arrival"][0])

    def _generate(self, gen: Generation, stream: bool) -> None:
        def answer() -> dict:
            return {"text": gen.text, "output_ids": list(gen.ids), "meta_info": gen.meta_info()}

        if stream:
            self._sse_start()
        for _step in gen.steps():
            if stream:
                self._sse(answer())
        if stream:
            self.wfile.write(b"data: [DONE]\n\n")
        else:
            self._json(200, answer())

    def chat_completions(self):
        req = self._admit(parse_chat)
        if req is None:
            return
        try:
            gen = Generation(self.state, req["prompt_tokens"], req["max_new_tokens"], req["arrival"])
            try:
                if req["stream"]:
                    self._chat_stream(gen, req)
                else:
                    for _step in gen.steps():
                        pass
                    self._json(200, chat_answer(gen, req, int(time.time())))
            finally:
                gen.close()
        finally:
            self.state.leave(req["arrival"][0])

    def _chat_stream(self, gen: Generation, req: dict) -> None:
        head = {"id": gen.rid, "object": "chat.completion.chunk", "created": int(time.time()),
                "model": req["model"]}

        def chunk(delta: dict, finish=None) -> dict:
            return {**head, "choices": [{"index": 0, "delta": {"reasoning_content": None, **delta},
                                         "logprobs": None, "finish_reason": finish, "matched_stop": None}]}

        self._sse_start()
        self._sse(chunk({"role": "assistant", "content": ""}))
        sent = 0
        for _step in gen.steps():
            words = gen.text.split()
            if len(words) > sent:
                self._sse(chunk({"content": ("" if not sent else " ") + " ".join(words[sent:])}))
                sent = len(words)
        self._sse(chunk({}, finish="length"))
        details = gen.spec_tokens_details() if req["return_spec_tokens_details"] else None
        if details is not None:
            self._sse({**head, "choices": [], "usage": None, "sglext": {"spec_tokens_details": details}})
        if req["include_usage"]:
            self._sse({**head, "choices": [], "usage": gen.usage()})
        self.wfile.write(b"data: [DONE]\n\n")


def chat_answer(gen: Generation, req: dict, created: int) -> dict:
    """ChatCompletionResponse of SGLang's OpenAI protocol, for one finished generation."""
    choice = {"index": 0, "message": {"role": "assistant", "content": gen.text, "reasoning_content": None},
              "logprobs": None, "finish_reason": "length", "matched_stop": None}
    if req["return_meta_info"]:
        choice["meta_info"] = gen.meta_info()
    out = {"id": gen.rid, "object": "chat.completion", "created": created, "model": req["model"],
           "choices": [choice], "usage": gen.usage(), "metadata": {"weight_version": WEIGHT_VERSION}}
    details = gen.spec_tokens_details() if req["return_spec_tokens_details"] else None
    if details is not None:
        out["sglext"] = {"spec_tokens_details": details}
    return out


def _ready(handler: Handler) -> None:
    # http_server.py ready(): TokenizerManager.is_ready(), i.e. up, healthy and not draining.
    handler._empty(200 if handler.state.healthy() else 503)


def _health_generation(state: State) -> None:
    """The /health check's own request: queued and admitted like any other, one step, one token. It
    does not count as a /generate request (no number, no seed, not in the request log)."""
    state.begin()
    try:
        state.wait_unstalled()
        time.sleep(state.model.step_seconds)
        with state.lock:
            state.last_receive = time.time()
    finally:
        state.end()


# The routes here that SGLang 0.5.23 marks @auth_level(AuthLevel.ADMIN_OPTIONAL) (entrypoints/http_server.py).
ADMIN_OPTIONAL_PATHS = ("/flush_cache",)

ROUTES = {
    ("GET", "/health"): Handler.health_generate,
    ("GET", "/health_generate"): Handler.health_generate,
    ("GET", "/ready"): _ready,
    ("GET", "/model_info"): Handler.model_info,
    ("GET", "/get_model_info"): Handler.model_info,
    ("GET", "/server_info"): Handler.server_info,
    ("GET", "/get_server_info"): Handler.server_info,
    ("POST", "/generate"): Handler.generate,
    ("PUT", "/generate"): Handler.generate,
    ("GET", "/flush_cache"): Handler.flush_cache,
    ("POST", "/flush_cache"): Handler.flush_cache,
    ("POST", "/v1/chat/completions"): Handler.chat_completions,
    ("GET", "/v1/loads"): Handler.loads,
}


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True  # in-flight requests never hold up SIGTERM
    allow_reuse_address = True


def launch_command(argv: list[str]) -> str:
    """SGLang 0.5.23's launch_command (srt/server_args.py prepare_server_args): the argv after
    ConfigArgumentMerger.merge_config_with_args (utils/server_args_config_parser.py: the YAML's
    options first, as `--key value` / bare store_true flags / `--key a b` for lists, then the
    command line without `--config FILE`), joined by spaces. Secrets stay in it (only
    --watermark-config is redacted)."""
    if "--config" not in argv:
        return " ".join(argv)
    at = argv.index("--config")
    merged: list[str] = []
    for key, value in _read_yaml(argv[at + 1]).items():
        if isinstance(value, bool):
            if ALL_OPTIONS.get(str(key), (str,))[0] is bool:  # store_true in SGLang
                merged += [f"--{key}"] if value else []
            else:
                merged += [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            merged += [f"--{key}", *(str(v) for v in value)] if value else []
        elif isinstance(value, dict):
            merged += [f"--{key}", json.dumps(value)]
        else:
            merged += [f"--{key}", str(value)]
    return " ".join(merged + argv[:at] + argv[at + 2:])


class Drain:
    """SIGTERM as SGLang 0.5.23 handles it.

    Once up (after warmup), TokenizerManager.auto_create_handle_loop has replaced the SIGTERM handler
    with SignalHandler.sigterm_handler (sets gracefully_exit, logs a warning) and started
    sigterm_watchdog: it looks at the flag every DRAIN_POLL_SECONDS, then logs `Gracefully
    exiting... Remaining number of requests N` every DRAIN_POLL_SECONDS until rid_to_state is empty
    (new requests are still served meanwhile; /health and /ready answer 503), and stops the server.
    A server marked unhealthy by a failed /health check, or SGL_FORCE_SHUTDOWN set, exits at once.
    Before that (the stand-in's "loading": SGLang's launch phase, where no SIGTERM handler is
    installed and the signal ends the process) there is nothing to drain: it stops at once.
    """

    def __init__(self, state: State, stop: threading.Event):
        self.state = state
        self.stop = stop

    def on_signal(self, signum, _frame):
        if self.state.ready.is_set() and signum == signal.SIGTERM and self.state.rank == 0:
            # loop.add_signal_handler calls it without arguments: signum=None frame=None in the log.
            log("WARNING SIGTERM received. signum=None frame=None. "
                "Draining requests and shutting down...")
            self.state.draining.set()
        elif self.state.ready.is_set() and signum == signal.SIGTERM:
            # engine.py: ranks > 0 wait for rank 0's ShutdownReq; the stand-in has no link to rank 0
            # and stops once the message is out (docs/lab.md says so).
            log(f"WARNING SIGTERM received on node_rank {self.state.rank}; waiting for the rank-0 "
                "ShutdownReq broadcast to stop the schedulers.")
            self.stop.set()
        else:
            self.stop.set()

    def watchdog(self) -> None:
        """TokenizerManager.sigterm_watchdog, started when the server is up."""
        st = self.state
        while not st.draining.is_set():
            time.sleep(DRAIN_POLL_SECONDS)
        while True:
            with st.lock:
                remaining = list(st.inflight.values())
            if st.unhealthy:
                log("ERROR Signal SIGTERM received while health check failed. Force exiting.")
                break
            if os.environ.get("SGL_FORCE_SHUTDOWN", "").lower() in ("1", "true", "yes", "on"):
                log("ERROR Signal SIGTERM received while force shutdown flag set. Force exiting.")
                break
            log(f"Gracefully exiting... Remaining number of requests {len(remaining)}. "
                f"Remaining requests remaining_rids={remaining!r}.")
            if not remaining:
                break
            time.sleep(DRAIN_POLL_SECONDS)
        self.stop.set()


def _listen(state: State, config: dict):
    handler = type("BoundHandler", (Handler,), {"state": state})
    try:
        server = Server((config["host"], config["port"]), handler)
    except OSError as e:
        raise StartError(f"cannot listen on {config['host']}:{config['port']}: "
                         f"{e.strerror or e}") from None
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                     name="http", daemon=True).start()
    return server


def _load(config: dict, model: Model, state: State, stop: threading.Event) -> None:
    """Caches, the target and the drafter, the extra "loading" seconds; sets state.ready."""
    write_caches(config)
    open_model(config["model-path"], "target", stop)
    drafter = config["speculative-draft-model-path"]
    if drafter and not stop.is_set():
        open_model(drafter, "drafter", stop)
    if stop.is_set():
        return
    if model.never_ready:
        log("GPUFLEET_STANDIN_NEVER_READY=1: staying 'loading' forever (lab knob)")
    elif not stop.wait(model.load_seconds):
        state.ready.set()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    stop = threading.Event()
    drain = None

    def on_signal(signum, frame):
        if drain is None:
            stop.set()
        else:
            drain.on_signal(signum, frame)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = None
    try:
        log("gpufleet lab SGLang STAND-IN (not SGLang, no GPU; its figures say nothing about GPU "
            f"performance), version {VERSION}, pid {os.getpid()}")
        ready_file, argv = _take_ready_file(argv)
        config = load_config(argv)
        drafter = config["speculative-draft-model-path"]
        # The drafter's block size is needed to check the accept knobs before anything starts.
        drafter_block = None
        if drafter and config["speculative-algorithm"]:
            try:
                drafter_block = int(json.loads((Path(drafter) / "config.json").read_text())
                                    .get("block_size") or 0) or None
            except (OSError, ValueError, TypeError, AttributeError):
                drafter_block = None  # open_model() below reports the bad drafter by name
        model = Model(config, drafter_block)
        state = State(config, model)
        state.launch_command = launch_command(argv)
        # entrypoints/engine.py: `logger.info(f"server_args={...resolved_dict()}")`, keys included.
        log(f"server_args={state.server_args()!r}")
        log("delay model: " + json.dumps(model.describe(), sort_keys=True))
        drain = Drain(state, stop)
        if state.rank == 0:
            server = _listen(state, config)
            log(f"listening on http://{config['host']}:{config['port']} (rank 0 of "
                f"{config['nnodes']}; /health answers 503 while loading)")
            announce(ready_file, state, "loading")
        _load(config, model, state, stop)
        if state.ready.is_set():
            if state.rank > 0:
                # engine.py: a rank > 0 starts its dummy health check server only after
                # wait_for_ready(): it does not listen before it is ready.
                server = _listen(state, config)
                log(f"listening on http://{config['host']}:{config['port']} (rank {state.rank} of "
                    f"{config['nnodes']}: health check server only)")
            else:
                threading.Thread(target=drain.watchdog, name="sigterm-watchdog", daemon=True).start()
            log("ready")
            announce(ready_file, state, "ready")
        while not stop.wait(0.5):
            pass
        return 0
    except ConfigError as e:
        print(f"usage: {PROG} --config FILE.yaml [--option value ...]", file=sys.stderr)
        print(f"{PROG}: error: {e}", file=sys.stderr, flush=True)
        return 2
    except StartError as e:
        log(f"error: {e}")
        return 1
    finally:
        if server is not None:
            closer = threading.Thread(target=server.shutdown, daemon=True)
            closer.start()
            closer.join(STOP_JOIN_SECONDS)
            server.server_close()
        if stop.is_set():
            log("stopped")


if __name__ == "__main__":
    sys.exit(main())
