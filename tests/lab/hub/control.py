"""What the lab controls on the Hub server: config, bandwidth caps, fault rules, request log."""

from __future__ import annotations

import bisect
import json
import re
import threading
import time

DEFAULT_CONFIG = {
    "cdn_url_ttl": 3600,  # seconds a signed CDN URL stays valid
    # 0: off; N: a signed CDN URL is also refused (403, expired) once N other blobs were first asked of the CDN
    # after it was signed: an expiry driven by the downloads' order, not by the clock (cdn_blob_mark/_stale)
    "cdn_url_blobs": 0,
    "rate_per_conn": 0,  # bytes/s per connection, 0 = uncapped
    "rate_total": 0,  # bytes/s over all connections of both addresses, 0 = uncapped
    "tree_page_size": 1000,  # the Hub's page size for /tree
    "tree_page_size_expand": 50,  # ... and with expand=true
}

_INT_KEYS = set(DEFAULT_CONFIG)

ACTIONS = ("status", "reset", "truncate", "stall", "hold")
_MAX_STALL = 600.0  # a stall never outlives a test run


class ConfigError(ValueError):
    pass


class TokenBucket:
    """Token bucket that lets a sender run into debt, so the long-run rate is exact.

    acquire(n) returns how long the caller must sleep before sending n bytes; the sleep happens
    outside the lock so connections sharing one bucket interleave fairly.
    """

    def __init__(self, rate: float):
        self.rate = float(rate)
        # A small burst keeps rate measurements over a couple of seconds within a few percent.
        self.burst = max(16 * 1024, self.rate * 0.05)
        self.tokens = self.burst
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def acquire(self, n: int) -> float:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
            self.tokens -= n
            return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


class FaultRule:
    def __init__(self, spec: dict, index: int):
        if not isinstance(spec, dict):
            raise ConfigError("each rule must be a JSON object")
        unknown = set(spec) - {"name", "server", "method", "path", "query", "nth", "times", "action",
                               "status", "retry_after", "message", "after_bytes", "seconds", "requests"}
        if unknown:
            raise ConfigError(f"unknown rule keys: {sorted(unknown)}")
        self.name = str(spec.get("name") or f"rule{index}")
        self.server = spec.get("server", "any")
        if self.server not in ("api", "cdn", "any"):
            raise ConfigError("server must be api, cdn or any")
        self.method = spec.get("method")
        self.method = self.method.upper() if self.method else None
        try:
            self.path = re.compile(spec.get("path") or ".*")
            self.query = re.compile(spec["query"]) if spec.get("query") else None
        except re.error as e:
            raise ConfigError(f"bad regex: {e}") from None
        self.nth = int(spec.get("nth", 1))
        self.times = spec.get("times")
        self.times = None if self.times is None else int(self.times)
        if self.nth < 1 or (self.times is not None and self.times < 0):
            raise ConfigError("nth must be >= 1 and times >= 0")
        self.action = spec.get("action", "status")
        if self.action not in ACTIONS:
            raise ConfigError(f"action must be one of {ACTIONS}")
        self.status = int(spec.get("status", 500))
        if self.action == "status" and not 400 <= self.status <= 599:
            raise ConfigError("status must be 4xx or 5xx")
        self.retry_after = spec.get("retry_after")
        self.message = spec.get("message")
        self.after_bytes = int(spec.get("after_bytes", 0))
        self.seconds = min(float(spec.get("seconds", 30)), _MAX_STALL)
        # hold: the number of requests for the path (this one included) that must have arrived
        self.requests = int(spec.get("requests", 2))
        if self.requests < 1:
            raise ConfigError("requests must be >= 1")
        self.spec = spec
        self.matched = 0
        self.fired = 0

    def check(self, server: str, method: str, path: str, query: str) -> bool:
        """Counts a matching request and says whether the rule fires on it (caller holds the lock)."""
        if self.server != "any" and self.server != server:
            return False
        if self.method and self.method != method:
            return False
        if not self.path.search(path):
            return False
        if self.query is not None and not self.query.search(query):
            return False
        self.matched += 1
        if self.matched < self.nth:
            return False
        if self.times is not None and self.fired >= self.times:
            return False
        self.fired += 1
        return True

    def describe(self) -> dict:
        return dict(self.spec, name=self.name, matched=self.matched, fired=self.fired)


class LabControl:
    """State shared by the API and CDN listeners; everything here is thread-safe."""

    def __init__(self, base_config: dict | None = None, log_file: str | None = None,
                 max_log_entries: int = 200_000):
        self.base_config = dict(DEFAULT_CONFIG)
        self.base_config.update(base_config or {})
        self.lock = threading.Lock()
        self.config = dict(self.base_config)
        self.rules: list = []
        self.log: list = []
        self.seq = 0
        self.max_log_entries = max_log_entries
        self.log_fh = open(log_file, "a", encoding="utf-8", buffering=1) if log_file else None
        self._total_bucket = None
        self._conn_seq = 0
        # Responses whose last byte is on its way but whose log entry is not written yet: a client
        # can see the end of a response before the server thread gets to record it.
        self._finishing = 0
        self._settled = threading.Condition(self.lock)
        # requests that arrived, per URL-decoded path (the hold fault waits on them)
        self._arrivals: dict = {}
        self._arrived = threading.Condition(self.lock)
        self.listing: dict = {}  # repo id -> hostile-listing spec (set_listing)
        self._cdn_blobs: list = []  # blob shas in the order the CDN was first asked for them (cdn_url_blobs)

    # -- config ------------------------------------------------------------------------------

    def update_config(self, changes: dict) -> dict:
        if not isinstance(changes, dict):
            raise ConfigError("config must be a JSON object")
        unknown = set(changes) - _INT_KEYS
        if unknown:
            raise ConfigError(f"unknown config keys: {sorted(unknown)}")
        clean = {}
        for k, v in changes.items():
            if v is None:
                v = 0
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"{k} must be a number >= 0")
            if k.startswith("tree_page_size") and v < 1:
                raise ConfigError(f"{k} must be >= 1")
            clean[k] = v
        with self.lock:
            self.config.update(clean)
            if "rate_total" in clean:
                self._total_bucket = None
            return dict(self.config)

    def cdn_blob_mark(self) -> int:
        """How many blobs the CDN has been asked for so far (a signed URL carries it: cdn_blob_stale)."""
        with self.lock:
            return len(self._cdn_blobs)

    def cdn_blob_stale(self, sha: str, mark: int) -> bool:
        """A CDN GET of ``sha`` by a URL signed at ``mark``: records ``sha`` as asked for (once), and says
        whether cdn_url_blobs other blobs were first asked for since the URL was signed (it has expired)."""
        with self.lock:
            if sha not in self._cdn_blobs:
                self._cdn_blobs.append(sha)
            budget = self.config["cdn_url_blobs"]
            return bool(budget) and sum(1 for other in self._cdn_blobs[mark:] if other != sha) >= budget

    def get_config(self) -> dict:
        with self.lock:
            return dict(self.config)

    def total_bucket(self):
        with self.lock:
            rate = self.config["rate_total"]
            if not rate:
                return None
            if self._total_bucket is None or self._total_bucket.rate != rate:
                self._total_bucket = TokenBucket(rate)
            return self._total_bucket

    def reset(self, settle: float = 2.0):
        """Back to the start-up config, no faults, an empty log. The requests whose response has
        already ended (``finishing``) record first, as ``get_log`` waits for them: else the entry of a
        request answered before the reset (a HEAD the client has seen) lands in the log after it."""
        with self.lock:
            self._settled.wait_for(lambda: self._finishing <= 0, timeout=settle)
            self.config = dict(self.base_config)
            self.rules = []
            self.log = []
            self._total_bucket = None
            self.listing = {}
            self._cdn_blobs = []

    def next_conn_id(self) -> int:
        with self.lock:
            self._conn_seq += 1
            return self._conn_seq

    # -- faults ------------------------------------------------------------------------------

    def set_faults(self, body, append: bool = False) -> list:
        specs = body.get("rules") if isinstance(body, dict) else body
        if not isinstance(specs, list):
            raise ConfigError('expected {"rules": [...]} or a JSON list of rules')
        with self.lock:
            start = len(self.rules) if append else 0
            new = [FaultRule(s, start + i) for i, s in enumerate(specs)]
            self.rules = (self.rules + new) if append else new
            return [r.describe() for r in self.rules]

    def list_faults(self) -> list:
        with self.lock:
            return [r.describe() for r in self.rules]

    def arrive(self, path: str) -> int:
        """Counts a request for ``path`` as it arrives; returns the count, this one included."""
        with self.lock:
            self._arrivals[path] = self._arrivals.get(path, 0) + 1
            self._arrived.notify_all()
            return self._arrivals[path]

    def wait_arrivals(self, path: str, count: int, timeout: float, stopping=None) -> bool:
        """Until ``count`` requests for ``path`` have arrived (True), or ``timeout`` s passed (False)."""
        with self.lock:
            return self._arrived.wait_for(
                lambda: self._arrivals.get(path, 0) >= count or (stopping is not None and stopping.is_set()),
                timeout=timeout) and self._arrivals.get(path, 0) >= count

    def match_fault(self, server, method, path, query):
        """First rule that fires on this request; every matching rule counts the request."""
        with self.lock:
            hit = None
            for r in self.rules:
                if r.check(server, method, path, query) and hit is None:
                    hit = r
            return hit

    # -- hostile listing ---------------------------------------------------------------------

    def set_listing(self, body, append: bool = False) -> dict:
        """Make the API lie about a repo (a broken or hostile mirror): see README "Hostile listing"."""
        specs = body.get("repos") if isinstance(body, dict) else None
        if not isinstance(specs, dict):
            raise ConfigError('expected {"repos": {"<org/name>": {...}}}')
        clean = {repo: _listing_spec(repo, spec) for repo, spec in specs.items()}
        with self.lock:
            self.listing = dict(self.listing, **clean) if append else clean
            return {"repos": json.loads(json.dumps(self.listing))}

    def get_listing(self) -> dict:
        with self.lock:
            return {"repos": json.loads(json.dumps(self.listing))}

    def listing_for(self, repo_id: str) -> dict | None:
        with self.lock:
            return self.listing.get(repo_id)

    # -- request log -------------------------------------------------------------------------

    def finishing(self, entry: dict):
        """The response's last byte is about to go: the entry takes its place in the log now.

        A client that reads a whole response and then sends its next request on another
        connection can have that request recorded before this one's thread gets to record; the
        seq taken here, before the client can see the end, keeps the log in the order a client
        saw its responses end (and no entry is numbered after one that started later than its end).
        """
        with self.lock:
            self._finishing += 1
            self.seq += 1
            entry["seq"] = self.seq

    def record(self, entry: dict, finishing: bool = False):
        with self.lock:
            if finishing:
                self._finishing -= 1
                self._settled.notify_all()
            if "seq" not in entry:
                self.seq += 1
                entry["seq"] = self.seq
            if self.log and self.log[-1]["seq"] > entry["seq"]:
                bisect.insort(self.log, entry, key=lambda e: e["seq"])
            else:
                self.log.append(entry)
            if len(self.log) > self.max_log_entries:
                del self.log[: len(self.log) - self.max_log_entries]
            if self.log_fh is not None:
                try:
                    self.log_fh.write(json.dumps(entry, sort_keys=True) + "\n")
                except OSError:
                    pass

    def get_log(self, since: int = 0, server: str | None = None, settle: float = 2.0) -> list:
        with self.lock:
            self._settled.wait_for(lambda: self._finishing <= 0, timeout=settle)
            return [dict(e) for e in self.log
                    if e["seq"] > since and (server is None or e["server"] == server)]


# What a hostile listing may replace in a file's tree / paths-info entry, and the switches of a repo.
LISTING_FILE_KEYS = ("oid", "lfs_oid", "path", "size", "drop")
LISTING_REPO_KEYS = ("files", "omit_sha", "leak_token", "private", "next_origin", "resolve_location")


def _listing_spec(repo: str, spec) -> dict:
    if not isinstance(spec, dict):
        raise ConfigError(f"{repo}: expected an object with some of {list(LISTING_REPO_KEYS)}")
    unknown = set(spec) - set(LISTING_REPO_KEYS)
    if unknown:
        raise ConfigError(f"{repo}: unknown keys {sorted(unknown)}")
    files = spec.get("files") or {}
    if not isinstance(files, dict):
        raise ConfigError(f"{repo}: files must map a real path to the fields to answer instead")
    for path, fields in files.items():
        if not isinstance(fields, dict) or not fields or set(fields) - set(LISTING_FILE_KEYS):
            raise ConfigError(f"{repo}: files[{path!r}] must set some of {list(LISTING_FILE_KEYS)}")
        drop = fields.get("drop", [])
        if not isinstance(drop, list) or not all(isinstance(k, str) for k in drop):
            raise ConfigError(f"{repo}: files[{path!r}].drop must be a list of entry keys")
    next_origin = spec.get("next_origin")
    if next_origin is not None and (not isinstance(next_origin, str) or not (
            next_origin == "cdn" or next_origin.startswith(("http://", "https://")))):
        raise ConfigError(f"{repo}: next_origin must be \"cdn\" or an http(s)://host[:port] origin")
    location = spec.get("resolve_location")
    if location is not None and (not isinstance(location, str) or not location):
        raise ConfigError(f"{repo}: resolve_location must be a non-empty string (the Location to answer)")
    return {"files": files, "omit_sha": bool(spec.get("omit_sha")), "leak_token": bool(spec.get("leak_token")),
            "private": bool(spec.get("private")), "next_origin": next_origin, "resolve_location": location}
