"""Load through an SGLang router: closed-loop clients streaming chat and /generate requests until told to stop.

The proof of issue 22 (tests/integration/targets/sglang_router_roll, tests/lab/bench_router.py) runs this on
the controller while a roll restarts the servers behind the router. Each of ``--clients`` threads sends one
STREAMING request, reads it to its end, records it and sends the next (closed loop), alternating
``POST /v1/chat/completions`` and ``POST /generate``, with the router's ``--api-key`` as Bearer, until the
stop file appears or the process gets SIGTERM/SIGINT; then every client finishes the request it has in
flight and the summary is written. Nothing here is timed against the clock: a run lasts exactly as long
as the caller's events (the roll) take.

The request shapes and the per-event folding (finish reason, tokens) are the collection's own
(plugins/module_utils/_sglang/chat.py: ``chat_body``/``generate_body``, ``chat_progress``/
``generate_progress``); the HTTP is http.client here, because the proof needs what those clients do not
expose: the response headers (the router's ``x-request-id``) and the difference between a request that
failed before its stream began and a stream that broke.

Per request (``--records`` JSONL): client, api, the ``X-Request-Id`` sent (the router forwards it to the
worker, whose request log records it: that is how a request is found again on the server that got it),
the ``x-request-id`` the router answered, start/end (``time.time()``), HTTP status, outcome and error:

* ``ok``: 2xx, and the stream ended properly: chat with a ``finish_reason`` and ``data: [DONE]``;
  /generate with its last event carrying ``meta_info.finish_reason`` and then ``data: [DONE]``;
* ``failed``: a non-2xx answer, a connection error before any answer, or an ``{"error": ...}`` event;
* ``truncated``: a 2xx stream that ended (EOF, reset, broken chunking, read timeout) without its end.

The summary (``--out``): sent, ok, failed, truncated, failures (= failed + truncated), latency p50/p99
of the ok requests (seconds, nearest rank), the same per API, the most frequent errors.

With ``--watch-workers`` a thread polls the router's ``GET /workers`` (every ``--watch-interval`` s) and
keeps each run of identical answers; ``removal_windows()`` turns them into, per worker URL, the
intervals in which that URL was certainly absent from ``/workers`` after having been listed (from the
end of the first poll that did not list it to the start of the last one that did not): the router routes
nothing new to a worker outside ``/workers``. ``check`` (``sent_after_removal()``) then counts the load's
requests that a server's request log (the stand-in's ``GPUFLEET_STANDIN_REQUEST_LOG``: one line per
request at its arrival, with ``t`` = ``time.time()`` on the lab host, the same kernel clock as here)
shows arriving inside such a window. The lab hosts share the controller's clock (systemd-nspawn
containers), so the two times compare directly.

Usage:
  router_load.py run --router URL --out summary.json [--records r.jsonl] [--progress p.json]
                     [--stop-file PATH] [--clients 8] [--max-tokens 400] [--watch-workers]
                     (the router's API key from the environment variable ROUTER_LOAD_API_KEY, never argv)
  router_load.py check --summary summary.json --log WORKER_URL=PATH ... [--out check.json]
  router_load.py workers --router URL [--expect URL ... [--wait S]]
  router_load.py watch --router URL --out changes.jsonl --stop-file PATH [--interval 0.5]

Standard library only (plus the collection's _sglang/chat.py).
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import pathlib
import re
import signal
import socket
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
API_KEY_ENV = "ROUTER_LOAD_API_KEY"
APIS = ("chat", "generate")
DEFAULT_CLIENTS = 8
DEFAULT_MAX_TOKENS = 400
READ_TIMEOUT = 120.0  # seconds one read of a stream may wait (a stalled server, not a measurement)
PROMPT = "Write a long story about a fleet of GPU servers that keeps serving while it updates."


def _collection_chat():
    """The collection's _sglang/chat.py, imported as the collection it is (a checkout is linked into a
    temporary ansible_collections tree; a collection copy, as under ansible-test, is used in place)."""
    if REPO.name == "llm" and REPO.parent.name == "gpufleet" and REPO.parent.parent.name == "ansible_collections":
        root = str(REPO.parents[2])
    else:
        root = tempfile.mkdtemp(prefix="router-load-coll-")
        link = pathlib.Path(root) / "ansible_collections" / "gpufleet" / "llm"
        link.parent.mkdir(parents=True)
        link.symlink_to(REPO)
    if root not in sys.path:
        sys.path.insert(0, root)
    from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import chat  # noqa: E402
    return chat


chat = _collection_chat()


def percentile(values, pct):
    """Nearest-rank percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def _mask(text, api_key):
    text = str(text)
    return text.replace(api_key, "********") if api_key else text


class Target:
    """Where the requests go: the router's base URL, split for http.client."""

    def __init__(self, base_url):
        parts = urllib.parse.urlsplit(base_url.rstrip("/"))
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError("router URL must be http://host:port, got %r" % base_url)
        self.base_url = base_url.rstrip("/")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path

    def connection(self, timeout):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


def request_body(api, max_tokens, number):
    request = {"prompt": "%s (request %d)" % (PROMPT, number), "max_new_tokens": max_tokens}
    if api == "chat":
        return "/v1/chat/completions", chat.chat_body(request, 1.0)
    body = chat.generate_body(request, 1.0)
    body["stream"] = True
    return "/generate", body


def _read_stream(resp, api, record):
    """Fold the SSE events of a 2xx answer into ``record``; sets outcome/error (ok, failed, truncated)."""
    state = {}
    progress = chat.chat_progress if api == "chat" else chat.generate_progress
    done = False
    try:
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            try:
                event = json.loads(payload.decode("utf-8"))
            except ValueError:
                record.update(outcome="failed", error="an event that is not JSON: %r" % payload[:200])
                return
            record["events"] += 1
            if isinstance(event, dict) and "error" in event and "choices" not in event and "meta_info" not in event:
                record.update(outcome="failed", error="error event: %s" % json.dumps(event["error"])[:200])
                return
            if isinstance(event, dict):
                progress(event, state)
    except (OSError, socket.timeout, http.client.HTTPException) as exc:
        record["error"] = "stream broke after %d events: %s" % (record["events"], exc.__class__.__name__)
    record["finish_reason"] = state.get("finish_reason")
    record["done"] = done
    if done and state.get("finish_reason"):
        record["outcome"] = "ok"
        return
    record["outcome"] = "truncated"
    if not record.get("error"):
        record["error"] = "stream ended after %d events without %s" % (
            record["events"], "its finish_reason" if done else "data: [DONE]")


def one_request(target, api, max_tokens, request_id, api_key=None, timeout=READ_TIMEOUT, number=0,
                clock=time.time):
    """Send one streaming request through the router and read it to its end; returns its record."""
    path, body = request_body(api, max_tokens, number)
    record = {"api": api, "request_id": request_id, "x_request_id": None, "start": clock(), "end": None,
              "status": None, "outcome": None, "error": None, "events": 0, "finish_reason": None, "done": False}
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "X-Request-Id": request_id}
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    conn = target.connection(timeout)
    try:
        try:
            conn.request("POST", target.prefix + path, body=json.dumps(body).encode("utf-8"), headers=headers)
            resp = conn.getresponse()
        except (OSError, socket.timeout, http.client.HTTPException) as exc:
            record.update(outcome="failed", error="connection error: %s" % _mask(exc, api_key))
            return record
        record["status"] = resp.status
        record["x_request_id"] = resp.getheader("x-request-id")
        if not 200 <= resp.status < 300:
            try:
                text = resp.read(300).decode("utf-8", "replace")
            except (OSError, socket.timeout, http.client.HTTPException):
                text = ""
            record.update(outcome="failed", error=_mask("HTTP %d: %s" % (resp.status, text.strip()), api_key))
            return record
        _read_stream(resp, api, record)
        return record
    finally:
        conn.close()
        record["end"] = clock()


def _counts(records):
    out = {"sent": len(records), "ok": 0, "failed": 0, "truncated": 0}
    for rec in records:
        out[rec["outcome"]] = out.get(rec["outcome"], 0) + 1
    out["failures"] = out["failed"] + out["truncated"]
    latencies = [rec["end"] - rec["start"] for rec in records if rec["outcome"] == "ok"]
    out["latency_p50"] = _round(percentile(latencies, 50))
    out["latency_p99"] = _round(percentile(latencies, 99))
    return out


def _round(value):
    return None if value is None else round(value, 3)


def summarize(records):
    """The figures of a run: counts, latency percentiles of the ok requests, per API, the top errors."""
    out = _counts(records)
    out["by_api"] = {api: _counts([r for r in records if r["api"] == api]) for api in APIS}
    errors = collections.Counter(re.sub(r"[0-9]+", "N", str(r["error"])) for r in records if r["outcome"] != "ok")
    out["errors"] = [{"error": err, "count": n} for err, n in errors.most_common(10)]  # numbers as N: one line per kind
    return out


class WorkersWatch(threading.Thread):
    """Polls the router's ``GET /workers``; keeps each run of identical answers (first and last poll)."""

    def __init__(self, target, api_key, interval, stop):
        super().__init__(name="workers-watch", daemon=True)
        self.target, self.api_key, self.interval, self.stop = target, api_key, interval, stop
        self.runs = []
        self.polls = 0
        self.errors = 0
        self.last_error = None

    def poll(self):
        t0 = time.time()
        try:
            workers = healthy_by_url(list_entries(self.target, self.api_key))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.errors += 1
            self.last_error = _mask(exc, self.api_key)
            return
        t1 = time.time()
        self.polls += 1
        if self.runs and self.runs[-1]["workers"] == workers:
            self.runs[-1]["last"] = [t0, t1]
            self.runs[-1]["polls"] += 1
        else:
            self.runs.append({"workers": workers, "first": [t0, t1], "last": [t0, t1], "polls": 1})

    def run(self):
        while True:
            self.poll()
            if self.stop.wait(self.interval):
                self.poll()
                return

    def report(self):
        return {"polls": self.polls, "errors": self.errors, "last_error": self.last_error, "runs": self.runs,
                "windows": removal_windows(self.runs)}


def removal_windows(runs):
    """Per worker URL, the intervals ``[from, to]`` in which it was certainly absent from /workers after
    having been listed: from the end of the first poll of an absent run to the start of the last poll of
    the consecutive absent runs (a poll's answer holds at some instant between its start and end)."""
    windows = {}
    seen = set()
    open_from = {}
    last_absent = {}
    for run in runs:
        present = set(run["workers"])
        for url in seen - present:
            open_from.setdefault(url, run["first"][1])
            last_absent[url] = run["last"][0]
        for url in present:
            if url in open_from:
                windows.setdefault(url, []).append([open_from.pop(url), last_absent.pop(url)])
            seen.add(url)
    for url, start in open_from.items():
        windows.setdefault(url, []).append([start, last_absent[url]])
    for url in seen:
        windows.setdefault(url, [])
    return {url: [w for w in spans if w[0] <= w[1]] for url, spans in windows.items()}


def sent_after_removal(windows, logs, prefix):
    """The load's requests (``request_id`` starting with ``prefix``) that a worker's request log shows
    arriving while that worker was out of /workers. ``logs``: worker URL -> list of log entries.

    Returns (violations, per_url); per_url says, per window, how many load requests that server got
    before it and after it (a check that saw no traffic on either side proves nothing)."""
    violations = []
    per_url = {}
    for url, entries in logs.items():
        mine = sorted(e["t"] for e in entries if str(e.get("request_id") or "").startswith(prefix))
        spans = windows.get(url, [])
        per_url[url] = {"load_requests": len(mine), "windows": []}
        for start, end in spans:
            inside = [t for t in mine if start <= t <= end]
            violations += [{"url": url, "t": t, "window": [start, end]} for t in inside]
            per_url[url]["windows"].append({"from": start, "to": end, "seconds": round(end - start, 3),
                                            "load_before": sum(1 for t in mine if t < start),
                                            "load_inside": len(inside),
                                            "load_after": sum(1 for t in mine if t > end)})
    return violations, per_url


def failures_by_url(records, logs):
    """Per worker URL, how many of the load's failed or truncated requests its request log shows arriving
    (found by their X-Request-Id); ``None`` for those no server logged (refused before they reached one)."""
    where = {}
    for url, entries in logs.items():
        for entry in entries:
            if entry.get("request_id"):
                where[entry["request_id"]] = url
    out = {url: 0 for url in logs}
    for rec in records:
        if rec["outcome"] != "ok":
            url = where.get(rec["request_id"])
            out[url if url else "None"] = out.get(url if url else "None", 0) + 1
    return out


class Load:
    """``clients`` closed-loop client threads; ``stop`` ends them after their request in flight."""

    def __init__(self, target, api_key, clients, max_tokens, prefix, timeout=READ_TIMEOUT, on_record=None):
        self.target, self.api_key, self.clients, self.max_tokens = target, api_key, clients, max_tokens
        self.prefix, self.timeout, self.on_record = prefix, timeout, on_record
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.records = []
        self.threads = []

    def client(self, index):
        number = 0
        while not self.stop.is_set():
            api = APIS[(index + number) % len(APIS)]
            record = one_request(self.target, api, self.max_tokens, "%s%d-%d" % (self.prefix, index, number),
                                 self.api_key, self.timeout, number)
            record["client"] = index
            with self.lock:
                self.records.append(record)
                if self.on_record:
                    self.on_record(record, self.records)
            number += 1

    def start(self):
        for index in range(self.clients):
            thread = threading.Thread(target=self.client, args=(index,), name="client-%d" % index, daemon=True)
            thread.start()
            self.threads.append(thread)

    def join(self):
        """Wait for every client's last request; returns how many never ended (bounded by the read timeout)."""
        deadline = time.monotonic() + self.timeout * 2 + 30
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return sum(1 for t in self.threads if t.is_alive())


def _write_json(path, data):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)


def cmd_run(args):
    api_key = os.environ.get(API_KEY_ENV) or None
    target = Target(args.router)
    prefix = args.prefix or "rl-%d-%d-" % (os.getpid(), int(time.time()))
    stop_watch = threading.Event()
    watch = WorkersWatch(target, api_key, args.watch_interval, stop_watch) if args.watch_workers else None

    def on_record(record, records):
        if args.records:
            with open(args.records, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record, sort_keys=True) + "\n")
        if args.progress:
            counts = _counts(records)
            counts["clients_with_ok"] = len({r["client"] for r in records if r["outcome"] == "ok"})
            _write_json(args.progress, counts)

    load = Load(target, api_key, args.clients, args.max_tokens, prefix, args.read_timeout, on_record)
    signal.signal(signal.SIGTERM, lambda *_: load.stop.set())
    signal.signal(signal.SIGINT, lambda *_: load.stop.set())
    started = time.time()
    if watch:
        watch.start()
    load.start()
    while not load.stop.wait(0.1):
        if args.stop_file and os.path.exists(args.stop_file):
            load.stop.set()
    stopping = time.time()
    unfinished = load.join()
    stop_watch.set()
    if watch:
        watch.join(15)
    with load.lock:
        records = list(load.records)
    summary = summarize(records)
    summary.update(router=target.base_url, clients=args.clients, max_tokens=args.max_tokens, request_id_prefix=prefix,
                   started=started, stopping=stopping, stopped=time.time(), unfinished=unfinished)
    summary["failed"] += unfinished
    summary["failures"] += unfinished
    if watch:
        summary["workers_watch"] = watch.report()
    _write_json(args.out, summary)
    print(json.dumps({k: summary[k] for k in ("sent", "ok", "failed", "truncated", "latency_p50", "latency_p99")}))
    return 0


def _read_log(path):
    entries = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if line:
                entries.append(json.loads(line))
    return entries


def cmd_check(args):
    with open(args.summary, encoding="utf-8") as handle:
        summary = json.load(handle)
    windows = (summary.get("workers_watch") or {}).get("windows") or {}
    logs = {}
    for item in args.log:
        url, path = item.split("=", 1)
        logs[url.rstrip("/")] = _read_log(path)
    violations, per_url = sent_after_removal(windows, logs, summary["request_id_prefix"])
    out = {"sent_after_removal": len(violations), "violations": violations[:20], "per_url": per_url}
    if args.records:
        out["failures_by_url"] = failures_by_url(_read_log(args.records), logs)
    if args.out:
        _write_json(args.out, out)
    print(json.dumps(out, indent=1, sort_keys=True))
    return 0


def list_entries(target, api_key):
    """The router's GET /workers entries as {url: [[id, is_healthy], ...]}: the id shows a re-add, and a URL
    the router lists twice has two entries."""
    conn = target.connection(10.0)
    try:
        headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}
        conn.request("GET", target.prefix + "/workers", headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise ValueError("GET /workers answered %d" % resp.status)
        out = {}
        for w in json.loads(body.decode("utf-8")).get("workers") or []:
            out.setdefault(w["url"], []).append([w.get("id"), bool(w.get("is_healthy"))])
        return out
    except http.client.HTTPException as exc:
        raise OSError(str(exc))
    finally:
        conn.close()


def healthy_by_url(entries):
    """{url: is_healthy} of list_entries' answer (a URL listed twice: healthy only if every entry is)."""
    return {url: all(pair[1] for pair in pairs) for url, pairs in entries.items()}


def cmd_watch(args):
    """A diagnostic journal of the router's /workers: one JSON line per change (time, entries by URL with
    their id and health, or the error), until the stop file appears. Bounded by --max-polls."""
    api_key = os.environ.get(API_KEY_ENV) or None
    target = Target(args.router)
    last = object()
    with open(args.out, "a", encoding="utf-8") as out:
        for _poll in range(args.max_polls):
            try:
                now = {"workers": list_entries(target, api_key)}
            except (OSError, ValueError) as exc:
                now = {"error": _mask(exc, api_key)}
            if now != last:
                out.write(json.dumps(dict(now, t=round(time.time(), 3)), sort_keys=True) + "\n")
                out.flush()
                last = now
            if os.path.exists(args.stop_file):
                return 0
            time.sleep(args.interval)
    return 0


def cmd_workers(args):
    """Print the router's workers; with --expect, wait (at most --wait s) until exactly those are listed, all
    healthy, and fail naming the difference otherwise."""
    api_key = os.environ.get(API_KEY_ENV) or None
    target = Target(args.router)
    want = sorted(u.rstrip("/") for u in args.expect or [])
    deadline = time.monotonic() + args.wait
    while True:
        try:
            entries = list_entries(target, api_key)
            workers = healthy_by_url(entries)
            problem = None
        except (OSError, ValueError) as exc:
            entries, workers, problem = {}, {}, _mask(exc, api_key)
        if problem is None and args.expect is not None:
            twice = sorted(url for url, pairs in entries.items() if len(pairs) > 1)
            if twice:
                problem = "listed more than once: %s" % {url: entries[url] for url in twice}
            elif sorted(workers) != want:
                problem = "listed %s, expected %s" % (sorted(workers), want)
            elif not all(workers.values()):
                problem = "not healthy: %s" % sorted(u for u, ok in workers.items() if not ok)
        if problem is None or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    print(json.dumps({"router": target.base_url, "workers": workers}, sort_keys=True))
    if problem:
        print("router %s: %s" % (target.base_url, problem), file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="closed-loop load until the stop file appears (or SIGTERM/SIGINT)")
    run.add_argument("--router", required=True, help="the router's base URL, http://host:port")
    run.add_argument("--out", required=True, help="the summary (JSON)")
    run.add_argument("--records", help="one JSON line per request")
    run.add_argument("--progress", help="counts so far (JSON, rewritten after each request)")
    run.add_argument("--stop-file", help="stop once this file exists")
    run.add_argument("--clients", type=int, default=DEFAULT_CLIENTS)
    run.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    run.add_argument("--prefix", help="X-Request-Id prefix (default rl-<pid>-<time>-)")
    run.add_argument("--read-timeout", type=float, default=READ_TIMEOUT)
    run.add_argument("--watch-workers", action="store_true", help="poll GET /workers (removal windows)")
    run.add_argument("--watch-interval", type=float, default=0.2)
    check = sub.add_parser("check", help="requests a server got while it was out of /workers")
    check.add_argument("--summary", required=True)
    check.add_argument("--log", action="append", default=[], help="WORKER_URL=PATH of its request log")
    check.add_argument("--records", help="the run's records (JSONL): failures counted per server")
    check.add_argument("--out")
    workers = sub.add_parser("workers", help="the router's GET /workers (with --expect: exactly those, healthy)")
    workers.add_argument("--router", required=True)
    workers.add_argument("--expect", nargs="*", help="worker URLs that must be listed, all healthy")
    workers.add_argument("--wait", type=float, default=0.0, help="seconds to wait for --expect to hold")
    watch = sub.add_parser("watch", help="journal each change of the router's GET /workers until the stop file")
    watch.add_argument("--router", required=True)
    watch.add_argument("--out", required=True, help="one JSON line per change (appended)")
    watch.add_argument("--stop-file", required=True)
    watch.add_argument("--interval", type=float, default=0.5)
    watch.add_argument("--max-polls", type=int, default=20000, help="a bound, never reached by a test's run")
    args = parser.parse_args(argv)
    return {"run": cmd_run, "check": cmd_check, "workers": cmd_workers, "watch": cmd_watch}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
