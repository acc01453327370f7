# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The peer book: the other hosts of a fleet, who holds which file, who is live, who served a file.

Private to the collection: not a public API, may change without notice.

``PeerBook`` is what ``peers.PeerSource`` knows of the peers. It asks every live peer (``HEAD`` with the
run's token: 200 with the listing's size means it holds the file) and reads their peer-status files
(``fetching``, ``done``, ``failed``).

A peer that refuses a connection, refuses the run's token (401/403), answers another error, or serves
bytes that fail the hash is dropped for the rest of the run. A passing fault (5xx, 429, a timeout, a
reset connection) is asked again with a backoff (``retry_wait`` doubled each time): a HEAD or status
read up to ``PEER_RETRIES`` more times at once, a file aria2 could not get from it in up to
``PEER_RETRIES`` more rounds (its strikes); only then is the peer dropped. Its token goes only to peer
URLs: HEADs here (no proxy, no redirect followed) and aria2's ``header=`` in its 0600 input file,
never to the Hub nor on argv.

A file is credited (``credit``) to a peer that served it to its end, never to a mirror aria2 gave up on.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import backoff

STATUS_FILE = "peer-status.json"
# "started": the role claimed this host's status for a run (peer_run) before its fetch starts.
STATES = ("started", "fetching", "done", "failed")
HEAD_THREADS = 8
# A peer-status file is a few paths; anything bigger is not one.
MAX_STATUS_BYTES = 4 << 20
# How many more times a peer's passing fault (5xx, 429, timeout, reset) is retried before it is dropped.
PEER_RETRIES = 3
# aria2's error codes for passing faults: timed out, network problem, server overloaded (503).
_PASSING_CODES = frozenset((2, 6, 29))
_PASSING_WORDS = ("timed out", "timeout", "reset", "eof", "broken pipe")


@dataclasses.dataclass
class Peer:
    """One peer and what this run learnt of it: its state, and why it was dropped (None: live)."""

    name: str
    url: str
    share: frozenset
    # whether the peer has Hub access (it fetches from the Hub what its owner could not give); by
    # default, whether it has a share (the plan gives the Hub's files to Hub hosts only)
    hub: bool = False
    state: str = "unknown"  # unknown (server up, no status yet), fetching, done, failed
    failed: frozenset = frozenset()
    dropped: str | None = None
    # files aria2 could not get from it in a row because of passing faults (a placed file resets it)
    strikes: int = 0
    # the run id its peer-status must carry (peer_run); None: any, and no status yet means "not started yet"
    run: str | None = None


def _gone(exc: BaseException) -> str:
    reason = getattr(exc, "reason", exc)
    return "unreachable (%s: %s)" % (type(reason).__name__, reason)


def passing(exc: BaseException) -> bool:
    """Whether a request's failure may be gone on the next try: 5xx, 429, a timeout, a reset or cut
    connection. Not: 401/403 (the run's token is the same in every request: a server that refuses it,
    a stale one of an earlier run or another service on the port, refuses it again), other 4xx,
    a refused connection (nothing listens: the peer's server stopped, e.g. in a failed host's rescue)."""
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code >= 500 or exc.code == 429
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ConnectionRefusedError):
        return False
    return isinstance(reason, (socket.timeout, TimeoutError, ConnectionResetError, ConnectionAbortedError,
                               BrokenPipeError, http.client.RemoteDisconnected, http.client.IncompleteRead))


def passing_uri_error(code: int | None, message: str, status: int | None) -> bool:
    """The same for what aria2's log says of a URI (its error code, message, HTTP status)."""
    if status is not None:
        return status >= 500 or status == 429
    text = (message or "").lower()
    if "refused" in text:
        return False
    return code in _PASSING_CODES or any(word in text for word in _PASSING_WORDS)


def _failure(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return "HTTP %d" % exc.code
    reason = getattr(exc, "reason", exc)
    return "%s: %s" % (type(reason).__name__, reason)


def _tries(exc: BaseException) -> str:
    return " (%d tries)" % (PEER_RETRIES + 1) if passing(exc) else ""


class PeerBook(object):
    """The peers of a run and what it learnt of them: their state, their strikes, why one was dropped."""

    def __init__(self, peers: Sequence[Peer], *, token: str, timeout: float, opener: Any, log: Callable[[str], None],
                 retry_wait: float = 1.0, sleep: Callable[[float], Any] = time.sleep) -> None:
        self.peers = list(peers)
        self.peer_token = token
        self.timeout = timeout
        self.opener = opener
        self.log = log
        self.asked: set[str] = set()  # peers whose status this look already read (once each per look)
        # the backoff of a passing fault: base seconds (doubled each retry) and the wait itself (tests: no clock)
        self.retry_wait = retry_wait
        self.sleep = sleep

    # -- who holds what ------------------------------------------------------------------------
    def _request(self, url: str, method: str) -> Any:
        headers = {"User-Agent": _hub.USER_AGENT, "Accept-Encoding": "identity"}
        req = urllib.request.Request(url, method=method, headers=headers)
        req.add_unredirected_header("Authorization", "Bearer %s" % self.peer_token)
        return self.opener.open(req, timeout=self.timeout)

    def _asked_again(self, peer: Peer, what: str, call: Callable[[], Any]) -> Any:
        """``call()`` (one request to ``peer``), asked again after a passing fault, at most PEER_RETRIES
        more times with a growing wait; the last failure (or any other) is raised to the caller."""
        for attempt in range(1, PEER_RETRIES + 2):
            try:
                return call()
            except (OSError, http.client.HTTPException) as exc:
                if attempt > PEER_RETRIES or not passing(exc):
                    raise
                headers = getattr(exc, "headers", None)
                asked = _hub.retry_after_seconds(headers.get("Retry-After")) if headers is not None else None
                wait = max(backoff(self.retry_wait, attempt), min(asked or 0.0, backoff(self.retry_wait, PEER_RETRIES)))
                self.log("peer %s: %s: %s; asking again in %.0f s (%d/%d)" % (
                    peer.name, what, _failure(exc), wait, attempt, PEER_RETRIES))
                self.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def drop(self, peer: Peer, reason: str) -> None:
        if peer.dropped is None:
            peer.dropped = reason
            self.log("peer %s dropped: %s" % (peer.name, reason))

    def file_url(self, peer: Peer, path: str) -> str:
        return peer.url + urllib.parse.quote(path, safe="/")

    def _head(self, pair: tuple[Peer, Any]) -> tuple[Peer, str, bool, str | None]:
        """(peer, path, holds it, reason to drop the peer or None)."""
        peer, item = pair
        path, size = item.remote.path, item.remote.size

        def head() -> str | None:
            with self._request(self.file_url(peer, path), "HEAD") as resp:
                return resp.headers.get("Content-Length")

        try:
            length = self._asked_again(peer, "HEAD %s" % path, head)
            if length is not None and length.strip().isdigit() and int(length) == size:
                return peer, path, True, None
            return peer, path, False, "HEAD %s: Content-Length %s, the listing says %d" % (path, _hub.shown(length), size)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return peer, path, False, None
            return peer, path, False, "HEAD %s: HTTP %d%s" % (path, exc.code, _tries(exc))
        except (OSError, http.client.HTTPException) as exc:
            return peer, path, False, _gone(exc) + _tries(exc)

    def refresh_status(self, peer: Peer) -> None:
        """The owner's peer-status: 404 means its server is up and its run has not started yet.

        With the run's id (``peer.run``: the role claims every host's status, "started", before any of
        them fetches), a 404 or another run's status means this host's stage of this run never started
        or failed before its fetch: the peer is gone (dropped) at once, not waited for."""

        def read() -> bytes:
            with self._request(peer.url + "%s/%s" % (_manifest.META_DIR, STATUS_FILE), "GET") as resp:
                return resp.read(MAX_STATUS_BYTES + 1)

        try:
            raw = self._asked_again(peer, "peer-status", read)
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and peer.run is not None:
                self.drop(peer, "its stage of this run never started (no peer-status of run %s)" % peer.run)
            elif exc.code == 404:
                peer.state = "unknown"
            else:
                self.drop(peer, "peer-status: HTTP %d%s" % (exc.code, _tries(exc)))
            return
        except (OSError, http.client.HTTPException) as exc:
            self.drop(peer, _gone(exc) + _tries(exc))
            return
        try:
            status = json.loads(raw.decode("utf-8")) if len(raw) <= MAX_STATUS_BYTES else None
        except ValueError:
            status = None
        if not isinstance(status, dict) or status.get("state") not in STATES or not isinstance(status.get("failed", []), list):
            self.drop(peer, "peer-status is not a peer-status file")
            return
        if peer.run is not None and status.get("run") != peer.run:
            self.drop(peer, "its stage of this run never started or failed before its fetch (its peer-status is of run %s, "
                            "not %s)" % (_hub.shown(status.get("run")), peer.run))
            return
        # "started": claimed for this run, the fetch is about to write "fetching": waited for like a run not started yet
        peer.state = "unknown" if status["state"] == "started" else status["state"]
        peer.failed = frozenset(p for p in status.get("failed", []) if isinstance(p, str))

    def holders(self, items: Sequence[Any]) -> dict[str, list[Peer]]:
        """{path: live peers holding it}; peers that answer wrong are dropped on the way."""
        pairs = [(peer, item) for item in items for peer in self.peers if peer.dropped is None]
        found: dict[str, list[Peer]] = {item.remote.path: [] for item in items}
        if not pairs:
            return found
        with ThreadPoolExecutor(max_workers=min(HEAD_THREADS, len(pairs))) as pool:
            answers = list(pool.map(self._head, pairs))
        for peer, path, holds, reason in answers:
            if reason is not None:
                self.drop(peer, reason)
        for peer, path, holds, reason in answers:
            if holds and peer.dropped is None:
                found[path].append(peer)
        return found

    def owner(self, path: str) -> Peer | None:
        for peer in self.peers:
            if path in peer.share:
                return peer
        return None

    def peer_of(self, url: str) -> Peer:
        return max((p for p in self.peers if url.startswith(p.url)), key=lambda p: len(p.url))

    # -- who is live ---------------------------------------------------------------------------
    def new_look(self) -> None:
        """A new look at the peers: each status is read again, once, when asked for."""
        self.asked = set()

    def look_at(self, peer: Peer) -> None:
        """``peer``'s status, read once per look."""
        if peer.name not in self.asked:
            self.asked.add(peer.name)
            self.refresh_status(peer)

    def owner_may_publish(self, path: str) -> bool:
        """Whether the owner of ``path`` (the peer whose share lists it) may still publish it: live, and
        its status says it still fetches (or has not started) and has not failed that file."""
        owner = self.owner(path)
        if owner is None or owner.dropped is not None:
            return False
        self.look_at(owner)
        return not (owner.dropped is not None or owner.state in ("done", "failed") or path in owner.failed)

    def hub_peers_busy(self) -> bool:
        """Whether a live peer with Hub access (its ``hub``; even one with an empty share, e.g. more
        Hub hosts than files) is still fetching or has not started: it fetches a file whose owner failed
        from the Hub and publishes it. Hosts without Hub access do not count, or two of them would wait
        for each other."""
        busy = False
        for peer in self.peers:
            if peer.dropped is not None or not peer.hub:
                continue
            self.look_at(peer)
            busy = busy or (peer.dropped is None and peer.state in ("unknown", "fetching"))
        return busy

    def uri_settled(self, url: str, error: tuple | None, *, path: str, failed: bool) -> tuple[bool, float]:
        """What aria2 said of one peer URI of a file (``error``: its (code, message, HTTP status), None
        when it did not fail): (the peer is to blame, the backoff before it is asked again). A failure
        for good drops the peer; a passing fault (5xx, 429, timeout, reset) on a file that failed is a
        strike, and PEER_RETRIES + 1 strikes in a row drop it; a file aria2 got after all resets them."""
        peer = self.peer_of(url)
        if error is None:
            if not failed:
                peer.strikes = 0
            return False, 0.0
        code, message, status = error
        reason = "GET %s: aria2 error %s: %s" % (path, code, message)
        if not passing_uri_error(code, message, status):
            self.drop(peer, reason)
            return True, 0.0
        if not failed:
            peer.strikes = 0  # aria2 asked again itself and got the file: a passing fault indeed
            return False, 0.0
        if peer.dropped is not None:
            return False, 0.0
        peer.strikes += 1
        if peer.strikes > PEER_RETRIES:
            self.drop(peer, "%s (%d rounds in a row)" % (reason, peer.strikes))
            return True, 0.0
        self.log("peer %s: %s; asked again next round (%d/%d)" % (peer.name, reason, peer.strikes, PEER_RETRIES))
        return True, backoff(self.retry_wait, peer.strikes)

    def dropped(self) -> list[dict[str, str]]:
        return [{"name": p.name, "reason": p.dropped} for p in self.peers if p.dropped is not None]

    # -- who served it -------------------------------------------------------------------------
    def credit(self, urls: Sequence[str], uri_errors: Mapping[str, Any]) -> Peer | None:
        """Of the peers behind ``urls`` (one file's URI and mirrors), the first whose URI did not fail (it
        served the file to its end), else the first that failed only passingly (aria2 asked it again and
        got the file); None when all failed for good."""
        for url in urls:
            if url not in uri_errors:
                return self.peer_of(url)
        for url in urls:
            if passing_uri_error(*uri_errors[url]):
                return self.peer_of(url)
        return None
