"""The lab's Hugging Face Hub-compatible HTTP server (API host + signed-URL "CDN" host).

    server.py --store DIR --api HOST:PORT --cdn HOST:PORT [--tokens FILE] [--log FILE] [--ready-file FILE]

Serves the fixture store under DIR (store/ + blobs/) with the API subset huggingface_hub and
aria2 use, plus a test-only control API under /_lab/ on the API address (faults, bandwidth caps,
request log). Port 0 picks a free port; when both listeners are up it prints one JSON line
{"api": URL, "cdn": URL} on stdout and writes the same document to the --ready-file (atomically:
tests/lab/ready.py starts the server and waits for it). SIGTERM or SIGINT stops it. See README.md
beside this file.

Standard library only; file bodies are streamed with os.sendfile, never read into memory.
"""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import fcntl
import hashlib
import hmac
import http.server
import json
import os
import secrets
import select
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
from urllib.parse import parse_qs, unquote, urlencode

_HERE = os.path.dirname(os.path.abspath(__file__))
if __package__ in (None, ""):
    # Run as a script (labctl): make the sibling modules importable.
    sys.path.insert(0, _HERE)
    from control import ConfigError, LabControl, TokenBucket  # noqa: E402
    from store import FixtureStore, RepoNotFound, RevisionNotFound  # noqa: E402
else:
    from .control import ConfigError, LabControl, TokenBucket
    from .store import FixtureStore, RepoNotFound, RevisionNotFound
# tests/lab/ready.py: the --ready-file format every lab server shares.
sys.path.insert(0, os.path.dirname(_HERE))
import ready  # noqa: E402

_UNCAPPED_CHUNK = 8 * 1024 * 1024
_SIOCOUTQ = 0x5411  # Linux: bytes still queued in a socket's send buffer
_MAX_BODY = 1024 * 1024  # POST bodies (paths-info, control API) are small
_IDLE_TIMEOUT = 120  # an idle keep-alive connection is dropped after this many seconds


def _iso(date: str) -> str:
    """The Hub's date format, which huggingface_hub's parse_datetime insists on."""
    if not date:
        return "1970-01-01T00:00:00.000Z"
    try:
        d = _dt.datetime.fromisoformat(date.replace("Z", "+00:00"))
    except ValueError:
        return date
    if d.tzinfo is not None:
        d = d.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"


def _truthy(v) -> bool:
    if isinstance(v, list):
        v = v[-1] if v else ""
    return str(v).lower() in ("1", "true", "yes", "on")


def _parse_range(header: str | None, size: int):
    """None: serve the whole body (no or unsupported Range); (start, end) inclusive; or 'unsat'."""
    if not header:
        return None
    h = header.strip()
    if not h.startswith("bytes=") or "," in h:
        return None  # multi-range is optional (RFC 9110): answer 200 with the whole body
    first, dash, last = h[6:].partition("-")
    first, last = first.strip(), last.strip()
    if not (first.isdigit() or first == "") or not (last.isdigit() or last == "") or (not first and not last):
        return None
    if not first:
        n = int(last)
        if n == 0 or size == 0:
            return "unsat"
        return max(0, size - n), size - 1
    start = int(first)
    end = int(last) if last else size - 1
    if last and end < start:
        return None
    if start >= size:
        return "unsat"
    return start, min(end, size - 1)


class HubError(Exception):
    def __init__(self, status, code=None, message="", headers=None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


class LabHub:
    """Both listeners plus the shared state. Usable from tests: start(), api_url, cdn_url, stop()."""

    def __init__(self, store_dir: str, api=("127.0.0.1", 0), cdn=("127.0.0.2", 0), tokens_file=None,
                 log_file=None, config=None):
        self.store = FixtureStore(store_dir)
        if not os.path.isdir(self.store.store_dir):
            raise SystemExit(f"hub: {store_dir} has no store/ directory (not a fixture store)")
        self.control = LabControl(config, log_file=log_file)
        self.tokens_file = tokens_file
        self._tokens: dict = {}
        self._tokens_mtime = None
        self._tokens_lock = threading.Lock()
        self.secret = secrets.token_bytes(32)
        self.stopping = threading.Event()
        self.api_server = _Server(tuple(api), _Handler, self, "api")
        self.cdn_server = _Server(tuple(cdn), _Handler, self, "cdn")
        self._threads = []
        if tokens_file:
            self.tokens()  # fail early on a missing or broken tokens file

    @property
    def api_url(self) -> str:
        h, p = self.api_server.server_address[:2]
        return f"http://{h}:{p}"

    @property
    def cdn_url(self) -> str:
        h, p = self.cdn_server.server_address[:2]
        return f"http://{h}:{p}"

    def start(self):
        for srv in (self.api_server, self.cdn_server):
            t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2},
                                 name=f"hub-{srv.role}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self):
        self.stopping.set()
        for srv in (self.api_server, self.cdn_server):
            srv.shutdown()
            srv.server_close()
        for t in self._threads:
            t.join(timeout=5)
        if self.control.log_fh:
            self.control.log_fh.close()
            self.control.log_fh = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- tokens ------------------------------------------------------------------------------

    def tokens(self) -> dict:
        """token -> {"name", "gated"}; re-read when the file changes so tests can add tokens."""
        if not self.tokens_file:
            return {}
        with self._tokens_lock:
            try:
                mtime = os.stat(self.tokens_file).st_mtime
            except OSError as e:
                if self._tokens_mtime is None:
                    raise SystemExit(f"hub: cannot read tokens file {self.tokens_file}: {e.strerror}")
                return self._tokens
            if mtime != self._tokens_mtime:
                try:
                    with open(self.tokens_file, encoding="utf-8") as fh:
                        data = json.load(fh)
                    if not isinstance(data, dict):
                        raise ValueError("top level must be an object")
                    self._tokens = {str(k): (v if isinstance(v, dict) else {}) for k, v in data.items()}
                    self._tokens_mtime = mtime
                except (OSError, ValueError) as e:
                    if self._tokens_mtime is None:
                        raise SystemExit(f"hub: bad tokens file {self.tokens_file}: {e}")
                    print(f"hub: ignoring broken tokens file update: {e}", file=sys.stderr)
            return self._tokens

    # -- signed CDN URLs ---------------------------------------------------------------------

    def sign(self, sha256: str, exp: int, mark: int) -> str:
        return hmac.new(self.secret, f"{sha256}\n{exp}\n{mark}".encode(), hashlib.sha256).hexdigest()

    def cdn_location(self, sha256: str) -> str:
        exp = int(time.time()) + int(self.control.get_config()["cdn_url_ttl"])
        mark = self.control.cdn_blob_mark()
        return f"{self.cdn_url}/cdn/{sha256}?" + urlencode({"exp": exp, "n": mark, "sig": self.sign(sha256, exp, mark)})


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # aria2 opens dozens of connections at once

    def __init__(self, addr, handler, hub, role):
        self.hub, self.role = hub, role
        try:
            super().__init__(addr, handler)
        except OSError as e:
            raise SystemExit(f"hub: cannot listen on {addr[0]}:{addr[1]} ({role}): {e.strerror}") from None

    def handle_error(self, request, client_address):
        # Clients hanging up mid-body are routine here (aria2 closes its first connection early).
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
            return
        super().handle_error(request, client_address)


class _Abort(Exception):
    """The client went away or a fault closed the connection; the response is over."""


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gpufleet-lab-hub/1"
    timeout = _IDLE_TIMEOUT

    def version_string(self):
        return self.server_version

    def setup(self):
        super().setup()
        self.hub: LabHub = self.server.hub
        self.role: str = self.server.role
        self.conn_id = self.hub.control.next_conn_id()
        self._conn_bucket = None
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def finish(self):
        try:
            super().finish()
        except (OSError, ValueError):
            pass

    def log_message(self, format, *args):  # noqa: A002 - the request log is the JSON log
        pass

    def do_GET(self):
        self._dispatch()

    def do_HEAD(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    # -- request plumbing --------------------------------------------------------------------

    def _dispatch(self):
        raw_path, qmark, query = self.path.partition("?")
        self._raw_path, self._query_str = raw_path, query
        self._query = parse_qs(query, keep_blank_values=True)
        self._body_cache = None
        self._fault = None
        self._arrival = 0
        self._entry = None
        self._finishing = False
        self._read_body()
        if self.role == "api" and raw_path.startswith("/_lab/"):
            return self._lab(raw_path)
        ctl = self.hub.control
        path = unquote(raw_path)
        self._entry = {
            "ts": round(time.time(), 6), "server": self.role, "method": self.command, "path": path,
            "query": query, "range": self.headers.get("Range"),
            "auth_present": self.headers.get("Authorization") is not None,
            "status": None, "bytes_sent": 0, "client": f"{self.client_address[0]}:{self.client_address[1]}",
            "conn_id": self.conn_id, "fault": None, "error": None,
            "user_agent": self.headers.get("User-Agent"),
        }
        t0 = time.monotonic()
        self._arrival = ctl.arrive(path)
        try:
            fault = ctl.match_fault(self.role, self.command, path, query)
            if fault is not None:
                self._entry["fault"] = fault.name
                if fault.action == "status":
                    return self._fault_status(fault)
                self._fault = fault
            try:
                if self.role == "api":
                    self._route_api(raw_path)
                else:
                    self._route_cdn(raw_path)
            except HubError as e:
                self._send_error(e)
        except _Abort as e:
            self._entry["error"] = str(e)
            self.close_connection = True
        finally:
            self._entry["duration"] = round(time.monotonic() - t0, 6)
            ctl.record(self._entry, finishing=self._finishing)

    def _read_body(self) -> bytes:
        """Read the whole request body once, so keep-alive connections stay in sync."""
        if self._body_cache is None:
            try:
                n = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                n = -1
            if n < 0 or n > _MAX_BODY:
                self.close_connection = True  # cannot skip it safely: drop the connection after answering
                self._body_cache = b""
            else:
                self._body_cache = self.rfile.read(n) if n else b""
        return self._body_cache

    def _send_error(self, e: HubError):
        headers = dict(e.headers)
        if e.code:
            headers["X-Error-Code"] = e.code
        if e.message:
            headers["X-Error-Message"] = e.message
        self._send_bytes(e.status, json.dumps({"error": e.message}).encode(), "application/json", headers)

    def _fault_status(self, fault):
        headers = {}
        if fault.retry_after is not None:
            headers["Retry-After"] = str(fault.retry_after)
            if fault.status == 429:
                # The Hub's IETF RateLimit headers, which huggingface_hub reads before Retry-After.
                headers["RateLimit"] = f'"api";r=0;t={int(fault.retry_after)}'
                headers["RateLimit-Policy"] = '"fixed window";"api";q=1000;w=300'
        msg = fault.message or f"lab fault {fault.name}: HTTP {fault.status}"
        headers["X-Error-Message"] = msg
        self._send_bytes(fault.status, json.dumps({"error": msg}).encode(), "application/json", headers)

    def _mark_finishing(self):
        if self._entry is not None and not self._finishing:
            self._finishing = True
            self.hub.control.finishing(self._entry)

    def _start(self, status: int, headers: dict, length: int, ctype: str | None):
        self._entry_status(status)
        if self.command == "HEAD" or length == 0:
            self._mark_finishing()
        self.send_response(status)
        if ctype:
            self.send_header("Content-Type", ctype)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(length))
        if self.close_connection:
            self.send_header("Connection", "close")
        try:
            self.end_headers()
        except OSError as e:
            raise _Abort(f"client gone: {e.__class__.__name__}") from None

    def _entry_status(self, status):
        if self._entry is not None:
            self._entry["status"] = status

    def _send_bytes(self, status, body: bytes, ctype="application/json", headers=None):
        self._start(status, headers or {}, len(body), ctype)
        if self.command != "HEAD":
            self._stream(body, 0, len(body))

    def _send_json(self, obj, status=200, headers=None):
        self._send_bytes(status, json.dumps(obj).encode(), "application/json", headers)

    # -- streaming with caps and faults ------------------------------------------------------

    def _buckets(self):
        cfg = self.hub.control.get_config()
        rate = cfg["rate_per_conn"]
        if not rate:
            self._conn_bucket = None
        elif self._conn_bucket is None or self._conn_bucket.rate != rate:
            self._conn_bucket = TokenBucket(rate)
        return [b for b in (self._conn_bucket, self.hub.control.total_bucket()) if b is not None]

    def _stream(self, src, offset: int, length: int):
        """Send `length` body bytes of src (bytes, or an fd read from `offset`), honouring caps and
        the request's body fault (reset / truncate / stall / hold after N bytes)."""
        fault = self._fault
        limit = length
        if fault is not None:
            limit = max(0, min(fault.after_bytes, length))
        sent = 0
        try:
            sent = self._send_body(src, offset, length, 0, limit)
            if fault is not None and fault.action == "hold":
                # the rest of the body waits for other requests of this path (a client's other
                # connections), then goes: an event to wait for, not a time (seconds: only a guard)
                if not self.hub.control.wait_arrivals(self._entry["path"], self._arrival - 1 + fault.requests,
                                                      fault.seconds, self.hub.stopping):
                    self._entry["error"] = f"fault {fault.name}: fewer than {fault.requests} requests within {fault.seconds}s"
                sent = self._send_body(src, offset, length, sent, length)
                fault = None
        except (OSError, TimeoutError) as e:
            raise _Abort(f"client gone after {self._entry_sent()} bytes: {e.__class__.__name__}") from None
        if fault is not None:
            self._apply_body_fault(fault)

    def _entry_sent(self) -> int:
        return self._entry["bytes_sent"] if self._entry is not None else 0

    def _send_body(self, src, offset: int, length: int, sent: int, limit: int) -> int:
        """Body bytes [sent, limit) of src, honouring the caps; returns the new ``sent``."""
        while sent < limit:
            n = limit - sent
            buckets = self._buckets()
            if buckets:
                rate = min(b.rate for b in buckets)
                n = min(n, max(16 * 1024, min(256 * 1024, int(rate / 50))))
                wait = max(b.acquire(n) for b in buckets)
                if wait > 0:
                    time.sleep(wait)
            else:
                n = min(n, _UNCAPPED_CHUNK)
            if sent + n >= length:
                self._mark_finishing()
            if isinstance(src, (bytes, bytearray, memoryview)):
                self.connection.sendall(memoryview(src)[offset + sent: offset + sent + n])
                k = n
            else:
                k = self._sendfile(src, offset + sent, n)
            sent += k
            if self._entry is not None:
                self._entry["bytes_sent"] += k
        return sent

    def _sendfile(self, fd: int, offset: int, count: int) -> int:
        sock = self.connection
        out = sock.fileno()
        done = 0
        poller = None
        while done < count:
            try:
                k = os.sendfile(out, fd, offset + done, count - done)
            except BlockingIOError:
                # Sockets with a timeout are non-blocking underneath: wait until writable.
                if poller is None:
                    poller = select.poll()
                    poller.register(out, select.POLLOUT)
                if not poller.poll(_IDLE_TIMEOUT * 1000):
                    raise TimeoutError("send timed out") from None
                continue
            if k == 0:
                raise OSError("blob shorter than its recorded size")
            done += k
        return done

    def _apply_body_fault(self, fault):
        self.close_connection = True
        if fault.action == "stall":
            deadline = time.monotonic() + fault.seconds
            while time.monotonic() < deadline and not self.hub.stopping.is_set():
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            self._mark_finishing()
            raise _Abort(f"fault {fault.name}: stalled {fault.seconds}s then closed")
        self._mark_finishing()
        if fault.action == "truncate":
            raise _Abort(f"fault {fault.name}: body truncated")
        # reset: let the bytes already sent reach the client, then abort with RST (SO_LINGER 0).
        sock = self.connection
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), _SIOCOUTQ, b"\0\0\0\0"))[0]
            except OSError:
                break
            if queued == 0:
                break
            time.sleep(0.005)
        # Acked is not read: Linux discards a peer's unread data when the RST lands, so give a
        # client that is reading a moment to take the bytes first.
        time.sleep(0.05)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        except OSError:
            pass
        raise _Abort(f"fault {fault.name}: connection reset")

    # -- auth --------------------------------------------------------------------------------

    def _token_info(self):
        """None without a token; raises 401 for a token the Hub does not know (as the real Hub does)."""
        auth = self.headers.get("Authorization")
        if auth is None:
            return None
        scheme, space, tok = auth.partition(" ")
        info = self.hub.tokens().get(tok.strip()) if scheme.lower() == "bearer" else None
        if info is None:
            raise HubError(401, None, "Invalid credentials in Authorization header")
        return info

    def _repo(self, repo_id: str, need_files: bool):
        try:
            repo = self.hub.store.get(repo_id)
        except RepoNotFound:
            raise HubError(404, "RepoNotFound", "Repository not found") from None
        info = self._token_info()
        hostile = self.hub.control.listing_for(repo_id)
        if (repo.private or (hostile and hostile["private"])) and info is None:
            raise HubError(404, "RepoNotFound", "Repository not found")
        if repo.gated and need_files:
            # Like the Hub: metadata of a gated repo is public, file contents are not.
            if info is None:
                raise HubError(401, "GatedRepo",
                               f"Access to model {repo_id} is restricted. You must have access to it and be "
                               "authenticated to access it. Please log in.")
            if not info.get("gated"):
                raise HubError(403, "GatedRepo",
                               f"Access to model {repo_id} is restricted and you are not in the authorized list. "
                               f"Visit {self.hub.api_url}/{repo_id} to ask for access.")
        return repo

    @staticmethod
    def _commit(repo, rev):
        try:
            return repo.resolve(rev)
        except RevisionNotFound:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {rev}") from None

    # -- API routes --------------------------------------------------------------------------

    def _route_api(self, raw_path: str):
        segs = [unquote(s) for s in raw_path.split("/")[1:]]
        m = self.command
        if segs[:2] == ["api", "whoami-v2"] and m == "GET":
            return self._whoami()
        if len(segs) >= 4 and segs[0] == "api" and segs[1] in ("models", "datasets", "spaces"):
            if segs[1] != "models":
                raise HubError(404, "RepoNotFound", "Repository not found")
            repo_id = f"{segs[2]}/{segs[3]}"
            rest = segs[4:]
            if m == "GET" and not rest:
                return self._model_info(repo_id, None)
            if m == "GET" and len(rest) == 2 and rest[0] == "revision":
                return self._model_info(repo_id, rest[1])
            if m == "GET" and len(rest) >= 2 and rest[0] == "tree":
                return self._tree(repo_id, rest[1], "/".join(rest[2:]).strip("/"))
            if m == "POST" and len(rest) == 2 and rest[0] == "paths-info":
                return self._paths_info(repo_id, rest[1])
            if m == "GET" and rest == ["refs"]:
                return self._refs(repo_id)
            if m == "GET" and len(rest) == 2 and rest[0] == "commits":
                return self._commits(repo_id, rest[1])
            raise HubError(404, None, "Not Found")
        if len(segs) >= 5 and segs[2] == "resolve" and m in ("GET", "HEAD"):
            return self._resolve(f"{segs[0]}/{segs[1]}", segs[3], "/".join(segs[4:]))
        raise HubError(404, None, "Not Found")

    def _whoami(self):
        info = self._token_info()
        if info is None:
            raise HubError(401, None, "Invalid credentials in Authorization header")
        name = info.get("name", "lab-user")
        self._send_json({"type": "user", "id": hashlib.sha1(name.encode()).hexdigest()[:24], "name": name,
                         "fullname": name, "orgs": [], "auth": {"type": "access_token",
                         "accessToken": {"displayName": name, "role": "read"}}})

    def _file_json(self, repo, commit, f, expand: bool) -> dict:
        d = {"type": "file", "oid": f.blob_id, "size": f.size, "path": f.path}
        if f.lfs:
            d["lfs"] = {"oid": f.lfs["sha256"], "size": int(f.lfs["size"]),
                        "pointerSize": int(f.lfs["pointer_size"])}
        hostile = self.hub.control.listing_for(repo.repo_id)
        lies = hostile["files"].get(f.path) if hostile else None
        if lies:
            # The hostile-listing control: only the listing lies; resolve still serves the real path.
            d.update({k: v for k, v in lies.items() if k in ("oid", "path", "size")})
            if "lfs_oid" in lies:
                d.setdefault("lfs", {"size": f.size, "pointerSize": 134})["oid"] = lies["lfs_oid"]
            for key in lies.get("drop", []):  # "lfs.oid" drops a key of the lfs object
                outer, dot, inner = key.partition(".")
                (d.get(outer) if dot and isinstance(d.get(outer), dict) else d).pop(inner if dot else key, None)
        if expand:
            lc = repo.last_commit(commit, f.path, False)
            d["lastCommit"] = {"id": lc.sha, "title": lc.title, "date": _iso(lc.date)}
            d["securityFileStatus"] = {"status": "safe", "avScan": {"virusFound": False, "virusNames": None},
                                       "pickleImportScan": None}
        return d

    def _dir_json(self, repo, commit, d: str, expand: bool) -> dict:
        out = {"type": "directory", "oid": commit.dirs[d], "size": 0, "path": d}
        if expand:
            lc = repo.last_commit(commit, d, True)
            out["lastCommit"] = {"id": lc.sha, "title": lc.title, "date": _iso(lc.date)}
        return out

    def _model_info(self, repo_id, rev):
        repo = self._repo(repo_id, need_files=False)
        commit = self._commit(repo, rev)
        blobs = _truthy(self._query.get("blobs", ["false"]))
        siblings = []
        for p in sorted(commit.files):
            f = commit.files[p]
            s = {"rfilename": p}
            if blobs:
                s.update(size=f.size, blobId=f.blob_id)
                if f.lfs:
                    s["lfs"] = {"sha256": f.lfs["sha256"], "size": int(f.lfs["size"]),
                                "pointerSize": int(f.lfs["pointer_size"])}
            siblings.append(s)
        first = commit
        for dummy in range(10000):
            if not first.parents or first.parents[0] not in repo.commits:
                break
            first = repo.commits[first.parents[0]]
        org = repo_id.split("/")[0]
        info = {
            "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
            "id": repo_id, "modelId": repo_id, "author": org, "sha": commit.sha,
            "lastModified": _iso(commit.date), "createdAt": _iso(first.date),
            "private": repo.private, "gated": "manual" if repo.gated else False, "disabled": False,
            "downloads": 0, "likes": 0, "tags": [], "library_name": None,
            "config": self._config_summary(repo, commit),
            "siblings": siblings, "spaces": [],
            "usedStorage": sum(f.size for f in commit.files.values()),
        }
        expand = self._query.get("expand", []) + self._query.get("expand[]", [])
        if expand:
            info = {k: v for k, v in info.items() if k in ("_id", "id") or k in expand}
        hostile = self.hub.control.listing_for(repo_id)
        if hostile and hostile["omit_sha"]:
            info.pop("sha", None)  # a mirror that does not say which commit a revision is
        self._send_json(info)

    def _config_summary(self, repo, commit):
        """The Hub's model_info carries a few config.json keys; worth having for callers that read them."""
        f = commit.files.get("config.json")
        if f is None or f.lfs or f.size > 1024 * 1024:
            return None
        got = self.hub.store.open_content(repo, f)
        if got is None:
            return None
        src, size = got
        try:
            data = src if isinstance(src, bytes) else os.pread(src, size, 0)
        finally:
            if not isinstance(src, bytes):
                os.close(src)
        try:
            cfg = json.loads(data)
        except ValueError:
            return None
        return {k: cfg[k] for k in ("architectures", "model_type", "auto_map") if k in cfg} or None

    def _tree(self, repo_id, rev, path):
        repo = self._repo(repo_id, need_files=False)
        commit = self._commit(repo, rev)
        recursive = _truthy(self._query.get("recursive", ["false"]))
        expand = _truthy(self._query.get("expand", ["false"]))
        if path and path not in commit.dirs:
            raise HubError(404, "EntryNotFound", f"{path} does not exist on \"{rev}\"",
                           {"X-Repo-Commit": commit.sha})
        if recursive:
            base = path + "/" if path else ""
            items = [("d", d) for d in commit.dirs if d and d.startswith(base)]
            items += [("f", p) for p in commit.files if p.startswith(base)]
        else:
            files, dirs = commit.children(path)
            items = [("d", d) for d in dirs] + [("f", p) for p in files]
        # Folders first, then files, each sorted: the same order on every page of the walk.
        items.sort(key=lambda it: (it[0] != "d", it[1]))
        cfg = self.hub.control.get_config()
        page = int(cfg["tree_page_size_expand"] if expand else cfg["tree_page_size"])
        try:
            start = int(base64.urlsafe_b64decode(self._query.get("cursor", [""])[0] + "==").decode() or 0)
        except ValueError:
            raise HubError(400, None, "invalid cursor") from None
        chunk = items[start:start + page]
        out = [self._dir_json(repo, commit, p, expand) if kind == "d" else
               self._file_json(repo, commit, commit.files[p], expand) for kind, p in chunk]
        headers = {}
        if start + page < len(items):
            q = {k: v[-1] for k, v in self._query.items() if k != "cursor"}
            q["cursor"] = base64.urlsafe_b64encode(str(start + page).encode()).decode().rstrip("=")
            origin = "http://" + (self.headers.get("Host") or self.hub.api_url.split("://", 1)[1])
            hostile = self.hub.control.listing_for(repo_id)
            if hostile and hostile["next_origin"]:
                # a mirror passing an upstream Link through, or a hostile one: the next page elsewhere
                origin = self.hub.cdn_url if hostile["next_origin"] == "cdn" else hostile["next_origin"].rstrip("/")
            headers["Link"] = f'<{origin}{self._raw_path}?{urlencode(q)}>; rel="next"'
        self._send_json(out, headers=headers)

    def _paths_info(self, repo_id, rev):
        body = self._read_body()
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        try:
            if ctype == "application/json":
                data = json.loads(body or b"{}")
                paths = data.get("paths") or []
                paths = [paths] if isinstance(paths, str) else list(paths)
                expand = _truthy(data.get("expand", False))
            else:
                form = parse_qs(body.decode("utf-8"), keep_blank_values=True)
                paths = form.get("paths", []) + form.get("paths[]", [])
                expand = _truthy(form.get("expand", ["false"]))
        except (ValueError, UnicodeDecodeError, AttributeError):
            raise HubError(400, None, "paths-info expects form or JSON with 'paths'") from None
        repo = self._repo(repo_id, need_files=False)
        commit = self._commit(repo, rev)
        out, seen = [], set()
        for p in paths:
            p = str(p).strip("/")
            if p in seen:
                continue
            seen.add(p)
            if p in commit.files:
                out.append(self._file_json(repo, commit, commit.files[p], expand))
            elif p in commit.dirs and p:
                out.append(self._dir_json(repo, commit, p, expand))
        self._send_json(out)

    def _refs(self, repo_id):
        repo = self._repo(repo_id, need_files=False)

        def fmt(kind, refs):
            return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": s} for n, s in sorted(refs.items())]

        out = {"branches": fmt("heads", repo.branches), "tags": fmt("tags", repo.tags), "converts": []}
        if _truthy(self._query.get("include_prs", ["0"])):
            out["pullRequests"] = []
        self._send_json(out)

    def _commits(self, repo_id, rev):
        repo = self._repo(repo_id, need_files=False)
        commit = self._commit(repo, rev)
        items, cur = [], commit
        for dummy in range(10000):
            items.append({"id": cur.sha, "title": cur.title, "message": "", "date": _iso(cur.date),
                          "authors": [{"user": "gpufleet-lab"}]})
            if not cur.parents or cur.parents[0] not in repo.commits:
                break
            cur = repo.commits[cur.parents[0]]
        self._send_json(items)

    def _resolve(self, repo_id, rev, path):
        repo = self._repo(repo_id, need_files=True)
        commit = self._commit(repo, rev)
        f = commit.files.get(path)
        if f is None:
            raise HubError(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": commit.sha})
        base = {"X-Repo-Commit": commit.sha, "Accept-Ranges": "bytes",
                "Content-Disposition": f'inline; filename="{os.path.basename(path)}"'}
        if f.lfs:
            sha = f.lfs["sha256"]
            loc = self.hub.cdn_location(sha)
            hostile = self.hub.control.listing_for(repo_id)
            auth = self.headers.get("Authorization") or ""
            if hostile and hostile["leak_token"] and auth.lower().startswith("bearer "):
                loc += "&" + urlencode({"token": auth.split(" ", 1)[1].strip()})  # a Hub that leaks the token
            if hostile and hostile["resolve_location"]:
                loc = hostile["resolve_location"]  # e.g. file:///etc/passwd: a redirect aria2 must never get
            base.update({"ETag": f'"{sha}"', "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(f.lfs["size"]),
                         "Location": loc})
            return self._send_bytes(302, f"Found. Redirecting to {loc}".encode(), "text/plain; charset=utf-8",
                                    base)
        base["ETag"] = f'"{f.blob_id}"'
        got = self.hub.store.open_content(repo, f)
        if got is None:
            raise HubError(500, None, f"fixture store has no content for {repo_id}/{path}")
        self._serve_content(got, base, "application/octet-stream")

    def _serve_content(self, got, headers, ctype):
        src, size = got
        try:
            rng = _parse_range(self.headers.get("Range"), size)
            if rng == "unsat":
                headers["Content-Range"] = f"bytes */{size}"
                return self._send_bytes(416, b"", None, headers)
            if rng is None:
                status, start, length = 200, 0, size
            else:
                start, end = rng
                status, length = 206, end - start + 1
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            self._start(status, headers, length, ctype)
            if self.command != "HEAD":
                self._stream(src, start, length)
        finally:
            if not isinstance(src, bytes):
                os.close(src)

    # -- CDN route ---------------------------------------------------------------------------

    def _route_cdn(self, raw_path: str):
        if self.command not in ("GET", "HEAD"):
            raise HubError(405, None, "Method Not Allowed")
        segs = raw_path.split("/")
        if len(segs) != 3 or segs[1] != "cdn":
            raise HubError(404, None, "Not Found")
        sha = segs[2]
        exp = self._query.get("exp", [""])[-1]
        mark = self._query.get("n", [""])[-1]
        sig = self._query.get("sig", [""])[-1]
        if not exp.isdigit() or not mark.isdigit() or not hmac.compare_digest(sig, self.hub.sign(sha, int(exp), int(mark))):
            raise HubError(403, None, "Invalid signature")
        if int(exp) < time.time():
            raise HubError(403, None, "Request has expired")
        if self.command == "GET" and self.hub.control.cdn_blob_stale(sha, int(mark)):
            raise HubError(403, None, "Request has expired")
        p = self.hub.store.blob_path(sha)
        if p is None:
            raise HubError(404, None, "No such blob")
        fd = os.open(p, os.O_RDONLY)
        size = os.fstat(fd).st_size
        self._serve_content((fd, size), {"Accept-Ranges": "bytes", "ETag": f'"{sha}"',
                                         "Cache-Control": "private, max-age=0"}, "application/octet-stream")

    # -- control API (/_lab/) -----------------------------------------------------------------

    def _lab(self, raw_path):
        ctl = self.hub.control
        m, p = self.command, raw_path
        try:
            body = self._read_body() if m in ("POST", "PUT") else b""
            data = json.loads(body) if body.strip() else {}
            if p == "/_lab/health" and m in ("GET", "HEAD"):
                return self._send_json({"ok": True, "api": self.hub.api_url, "cdn": self.hub.cdn_url,
                                        "repos": self.hub.store.repo_ids()})
            if p == "/_lab/reset" and m == "POST":
                ctl.reset()
                return self._send_json({"ok": True, "config": ctl.get_config()})
            if p == "/_lab/faults":
                if m == "GET":
                    return self._send_json({"rules": ctl.list_faults()})
                if m == "POST":
                    append = _truthy(self._query.get("append", ["false"]))
                    return self._send_json({"rules": ctl.set_faults(data, append=append)})
                if m == "DELETE":
                    return self._send_json({"rules": ctl.set_faults([])})
            if p == "/_lab/config":
                if m == "GET":
                    return self._send_json(ctl.get_config())
                if m == "POST":
                    return self._send_json(ctl.update_config(data))
            if p == "/_lab/listing":
                if m == "GET":
                    return self._send_json(ctl.get_listing())
                if m == "POST":
                    append = _truthy(self._query.get("append", ["false"]))
                    return self._send_json(ctl.set_listing(data, append=append))
                if m == "DELETE":
                    return self._send_json(ctl.set_listing({"repos": {}}))
            if p == "/_lab/log" and m == "GET":
                since = int(self._query.get("since", ["0"])[-1] or 0)
                server = self._query.get("server", [None])[-1]
                return self._send_json(ctl.get_log(since=since, server=server))
            if p == "/_lab/sign" and m == "GET":
                sha = self._query.get("sha256", [""])[-1]
                return self._send_json({"url": self.hub.cdn_location(sha)})
            raise HubError(404, None, f"no control endpoint {m} {p}")
        except (ConfigError, ValueError, TypeError) as e:
            self._send_error(HubError(400, None, str(e)))
        except HubError as e:
            self._send_error(e)
        except _Abort:
            self.close_connection = True


def _hostport(s: str):
    host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {s!r}")
    return host.strip("[]"), int(port)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="gpufleet lab Hub-compatible server")
    ap.add_argument("--store", required=True, help="fixture store root (contains store/ and blobs/)")
    ap.add_argument("--api", required=True, type=_hostport, help="API address HOST:PORT (port 0: any free)")
    ap.add_argument("--cdn", required=True, type=_hostport, help="CDN address HOST:PORT (port 0: any free)")
    ap.add_argument("--tokens", help='JSON file: {"<token>": {"name": str, "gated": bool}} '
                    "(default: DIR/tokens.json if it exists)")
    ap.add_argument("--log", help="append the request log here as JSON lines")
    ap.add_argument("--cdn-url-ttl", type=int, default=3600, help="signed CDN URL lifetime (s)")
    ap.add_argument("--tree-page-size", type=int, default=1000, help="entries per /tree page")
    ap.add_argument("--ready-file", help="write the ready JSON here once both listeners are up")
    args = ap.parse_args(argv)
    if args.tokens is None and os.path.isfile(os.path.join(args.store, "tokens.json")):
        args.tokens = os.path.join(args.store, "tokens.json")

    hub = LabHub(args.store, api=args.api, cdn=args.cdn, tokens_file=args.tokens, log_file=args.log,
                 config={"cdn_url_ttl": args.cdn_url_ttl, "tree_page_size": args.tree_page_size})
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    hub.start()
    info = {"api": hub.api_url, "cdn": hub.cdn_url}
    print(json.dumps(info), flush=True)
    if args.ready_file:
        ready.write(args.ready_file, info)
    while not done.wait(1.0):
        pass
    hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
