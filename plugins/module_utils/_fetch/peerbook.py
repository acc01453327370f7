# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The peer book: the other hosts of a fleet, who holds which file, who is live, who served a file.

Private to the collection: not a public API, may change without notice.

``PeerBook`` is what ``peers.PeerSource`` knows of the peers: their peer-status files (``fetching``,
``done``, ``failed``, and ``held``: the files each has verified and placed, path and size), read with
the run's token. A look (one per resolve) reads at most ``STATUS_READS`` status files: every live peer
when there are no more than that, else the next ``SAMPLE`` peers of this host's own shuffled order (a
rotation, seeded by this host's name) plus owners the verdicts need; what a look did not read is known
from an earlier one (``held`` only grows during a run). So discovery costs one small GET per peer per
look, flat in the number of files and bounded in the number of peers, never a HEAD per file per peer.
A peer whose status has no ``held`` (a server without a status, or an older collection) is still asked
per file (``HEAD`` with the token: 200 with the listing's size means it holds the file). A peer only
claims: every byte it serves is checked against the listing's hash before it is placed.

Mirrors are ordered per host (``order``): the peers this host asked least so far first, ties in this
host's shuffled order, so the hosts of a fleet do not all start at the same holders.

A peer that refuses a connection, refuses the run's token (401/403), answers another error, or serves
bytes that fail the hash is dropped for the rest of the run. A passing fault (5xx, 429, a timeout, a
reset connection) is asked again with a backoff (``retry_wait`` doubled each time): a HEAD or status
read up to ``PEER_RETRIES`` more times at once (not a timeout: a peer that does not answer a control
request within ``STATUS_TIMEOUT`` is dropped at once, and its other queued requests are not sent), a file aria2 could not get from it in up to
``PEER_RETRIES`` more rounds (its strikes); only then is the peer dropped. Its token goes only to peer
URLs: HEADs here (no proxy, no redirect followed) and aria2's ``header=`` in its 0600 input file,
never to the Hub nor on argv.

A file is credited (``credit``) to a peer that served it to its end, never to a mirror aria2 gave up on.
"""

from __future__ import annotations

import dataclasses
import http.client
import hashlib
import json
import random
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
# Status files read per look at most, and of those the peers of the rotation when there are more live
# peers than STATUS_READS (the rest: owners a verdict needs); flat in the fleet's size.
STATUS_READS = 16
SAMPLE = 12
# A control request (a status file, a HEAD) is a few hundred bytes: a peer that does not answer one in
# this long (or the run's timeout, if shorter) is taken for hung and dropped, its other requests unsent.
STATUS_TIMEOUT = 10.0
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
    # {path: size} it says it holds verified (its status' "held"); None: it publishes no list (asked by HEAD)
    held: dict | None = None
    read: bool = False  # whether a status read of it answered yet (a 404 counts: nothing to read)
    rank: int = 0  # its place in this host's shuffled order
    asked_for: int = 0  # files this host asked it for first so far


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
    return " (%d tries)" % (PEER_RETRIES + 1) if passing(exc) and not timed_out(exc) else ""


def timed_out(exc: BaseException) -> bool:
    """Whether a request failed because the peer did not answer in time (hung, or its link is gone)."""
    reason = getattr(exc, "reason", exc)
    return isinstance(reason, (socket.timeout, TimeoutError))


def shuffled(names: Sequence[str], seed: str) -> list[str]:
    """``names`` in this host's own order: shuffled with a seed derived from ``seed`` (the host's name),
    the same on every run of that host, different from host to host."""
    rng = random.Random(int.from_bytes(hashlib.sha256(seed.encode("utf-8")).digest()[:8], "big"))
    out = sorted(names)
    rng.shuffle(out)
    return out


def heir_rank(path: str, name: str) -> int:
    """A host's rank for fetching ``path`` from the Hub when its owner is gone (highest first): a hash of
    both, so the files of a gone owner spread over the hosts, and every host computes the same."""
    return int.from_bytes(hashlib.sha256(("%s\0%s" % (path, name)).encode("utf-8")).digest()[:8], "big")


def parse_held(raw: Any) -> dict | None:
    """A status' ``held`` ({path: size}) checked, None when absent; ValueError when it is no such map."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                            for k, v in raw.items()):
        raise ValueError("held is not a map of paths to sizes")
    return dict(raw)


class PeerBook(object):
    """The peers of a run and what it learnt of them: their state, their strikes, why one was dropped."""

    def __init__(self, peers: Sequence[Peer], *, token: str, timeout: float, opener: Any, log: Callable[[str], None],
                 retry_wait: float = 1.0, sleep: Callable[[float], Any] = time.sleep, seed: str = "") -> None:
        self.peers = list(peers)
        self.seed = seed
        by_name = {p.name: p for p in self.peers}
        # this host's rotation over the peers for the status reads, and its mirror order's tie-break
        self.rotation = [by_name[name] for name in shuffled(list(by_name), seed)]
        for rank, peer in enumerate(self.rotation):
            peer.rank = rank
        self.cursor = 0
        self.requests = 0  # control requests sent (status reads, HEADs), for the bench
        self.changed = False  # whether a status read showed something new (a state, a held file) since last asked
        self.peer_token = token
        self.timeout = timeout
        self.opener = opener
        self.log = log
        self.places: dict[str, list[Peer]] = {}  # path -> the peers placed before this host for it (place)
        self.asked: set[str] = set()  # peers whose status this look already read (once each, STATUS_READS at most)
        # the backoff of a passing fault: base seconds (doubled each retry) and the wait itself (tests: no clock)
        self.retry_wait = retry_wait
        self.sleep = sleep

    # -- who holds what ------------------------------------------------------------------------
    def _request(self, url: str, method: str) -> Any:
        headers = {"User-Agent": _hub.USER_AGENT, "Accept-Encoding": "identity"}
        req = urllib.request.Request(url, method=method, headers=headers)
        req.add_unredirected_header("Authorization", "Bearer %s" % self.peer_token)
        self.requests += 1
        return self.opener.open(req, timeout=min(self.timeout, STATUS_TIMEOUT))

    def _asked_again(self, peer: Peer, what: str, call: Callable[[], Any]) -> Any:
        """``call()`` (one request to ``peer``), asked again after a passing fault, at most PEER_RETRIES
        more times with a growing wait; the last failure (or any other) is raised to the caller."""
        for attempt in range(1, PEER_RETRIES + 2):
            try:
                return call()
            except (OSError, http.client.HTTPException) as exc:
                if attempt > PEER_RETRIES or not passing(exc) or timed_out(exc):
                    raise  # a timeout: hung or gone; asked again it would hold this look up as long once more
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

        if peer.dropped is not None:
            return peer, path, False, None  # dropped meanwhile (e.g. it timed out): its queued HEADs are not sent
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
            if timed_out(exc):
                self.drop(peer, self._hung(exc))  # at once: the HEADs still queued for it see it dropped
            return peer, path, False, _gone(exc) + _tries(exc)

    def _hung(self, exc: BaseException) -> str:
        return "%s after %.0f s (hung: its other requests are not sent)" % (_gone(exc), min(self.timeout, STATUS_TIMEOUT))

    def refresh_status(self, peer: Peer) -> None:
        """The owner's peer-status: 404 means its server is up and its run has not started yet.

        With the run's id (``peer.run``: the role claims every host's status, "started", before any of
        them fetches), a 404 or another run's status means this host's stage of this run never started
        or failed before its fetch: the peer is gone (dropped) at once, not waited for."""

        def read() -> bytes:
            with self._request(peer.url + "%s/%s" % (_manifest.META_DIR, STATUS_FILE), "GET") as resp:
                return resp.read(MAX_STATUS_BYTES + 1)

        peer.read = True
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
            self.drop(peer, self._hung(exc) if timed_out(exc) else _gone(exc) + _tries(exc))
            return
        try:
            status = json.loads(raw.decode("utf-8")) if len(raw) <= MAX_STATUS_BYTES else None
            held = parse_held(status.get("held")) if isinstance(status, dict) else None
        except ValueError:
            status = None
        if not isinstance(status, dict) or status.get("state") not in STATES or not isinstance(status.get("failed", []), list):
            self.drop(peer, "peer-status is not a peer-status file")
            return
        if peer.run is not None and status.get("run") != peer.run:
            self.drop(peer, "its stage of this run never started or failed before its fetch (its peer-status is of run %s, "
                            "not %s)" % (_hub.shown(status.get("run")), peer.run))
            return
        if status["state"] == "started" and held is None:
            held = {}  # a claim (claim.py): its fetch has placed nothing yet, and will list what it places
        # "started": claimed for this run, the fetch is about to write "fetching": waited for like a run not started yet
        state = "unknown" if status["state"] == "started" else status["state"]
        self.changed = self.changed or state != peer.state or (held is not None and held != peer.held)
        peer.state = state
        peer.failed = frozenset(p for p in status.get("failed", []) if isinstance(p, str))
        peer.held = held

    def survey(self) -> None:
        """This look's status reads, in parallel: every live peer when they are few, else the next SAMPLE
        of the rotation not known done (what the others hold is known from earlier looks)."""
        live = [p for p in self.rotation if p.dropped is None]
        if len(live) > STATUS_READS:
            # a peer done (and read so) holds all it ever will: the rotation skips it, its list stands
            picked: list[Peer] = []
            for dummy in range(len(self.rotation)):
                if len(picked) >= SAMPLE:
                    break
                peer = self.rotation[self.cursor % len(self.rotation)]
                self.cursor += 1
                if peer.dropped is None and not (peer.state == "done" and peer.held is not None):
                    picked.append(peer)
            live = picked
        fresh = self._booked(live)
        if len(fresh) == 1:
            self.refresh_status(fresh[0])
        elif fresh:
            with ThreadPoolExecutor(max_workers=min(HEAD_THREADS, len(fresh))) as pool:
                list(pool.map(self.refresh_status, fresh))

    def _claims(self, peer: Peer, path: str, size: int) -> bool:
        """Whether ``peer``'s last status lists ``path`` with the listing's size (a peer listing another size
        is dropped: it would serve other bytes)."""
        have = peer.held.get(path) if peer.held is not None else None
        if have is not None and have != size:
            self.drop(peer, "its peer-status lists %s with %d bytes, the listing says %d" % (path, have, size))
        return have == size and peer.dropped is None

    def holders(self, items: Sequence[Any]) -> dict[str, list[Peer]]:
        """{path: live peers holding it}, by their status' ``held`` (read in this look, or known from an
        earlier one), and a HEAD per file to the peers that publish no list; wrong answers drop a peer."""
        self.survey()
        found: dict[str, list[Peer]] = {item.remote.path: [] for item in items}
        for item in items:
            for peer in self.peers:
                if peer.dropped is None and peer.held is not None and self._claims(peer, item.remote.path, item.remote.size):
                    found[item.remote.path].append(peer)
        pairs = [(peer, item) for item in items for peer in self.peers
                 if peer.dropped is None and peer.held is None and peer.read]
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

    def known_holders(self, path: str, size: int) -> list[Peer]:
        """The live peers that hold ``path`` (with the listing's size) by the status lists read so far: no request."""
        return [p for p in self.peers if p.dropped is None and p.held is not None and p.held.get(path) == size]

    def order(self, holding: Sequence[Peer]) -> list[Peer]:
        """Mirrors for one file: the peers this host asked least so far first, then in its shuffled order."""
        return sorted(holding, key=lambda p: (p.asked_for, p.rank))

    def orphaned(self, path: str) -> bool:
        """Whether the owner of ``path`` is known gone or done without it (no request: what was read so far)."""
        owner = self.owner(path)
        return owner is not None and (owner.dropped is not None or owner.state in ("done", "failed") or path in owner.failed)

    def owner(self, path: str) -> Peer | None:
        for peer in self.peers:
            if path in peer.share:
                return peer
        return None

    def peer_of(self, url: str) -> Peer:
        return max((p for p in self.peers if url.startswith(p.url)), key=lambda p: len(p.url))

    # -- who is live ---------------------------------------------------------------------------
    def new_look(self) -> None:
        """A new look at the peers: each status is read again, once, when asked for (STATUS_READS at most)."""
        self.asked = set()

    def _booked(self, peers: Sequence[Peer]) -> list[Peer]:
        """Those of ``peers`` whose status this look has not read yet, within its STATUS_READS, booked as read."""
        fresh = [p for p in peers if p.name not in self.asked][:max(0, STATUS_READS - len(self.asked))]
        self.asked.update(p.name for p in fresh)
        return fresh

    def look_at(self, peer: Peer) -> None:
        """``peer``'s status, read once per look; past STATUS_READS reads, what an earlier look read stands."""
        if self._booked([peer]):
            self.refresh_status(peer)

    def owner_may_publish(self, path: str) -> bool:
        """Whether the owner of ``path`` (the peer whose share lists it) may still publish it: live, and
        its status says it still fetches (or has not started) and has not failed that file."""
        owner = self.owner(path)
        if owner is None or owner.dropped is not None:
            return False
        self.look_at(owner)
        return not (owner.dropped is not None or owner.state in ("done", "failed") or path in owner.failed)

    def place(self, path: str, me: str) -> int:
        """This host's place (0: first) for ``path`` among the run's hosts (its peers and ``me``) by heir_rank, the
        same order on every host, different from file to file; peers dropped or failed do not count (they will
        not fetch it: the live host placed first always may). No request; the ranking is computed once per file."""
        if path not in self.places:
            mine = heir_rank(path, me)
            self.places[path] = [p for p in self.peers if heir_rank(path, p.name) > mine]
        return sum(1 for p in self.places[path] if p.dropped is None and p.state != "failed")

    def estimate(self, known: int) -> float:
        """How many peers hold a file ``known`` of the peers read so far hold: scaled up to the live peers not read
        yet (past STATUS_READS a host has read only some of them; the rotation samples them evenly)."""
        live = [p for p in self.peers if p.dropped is None]
        read = sum(1 for p in live if p.held is not None)
        return known * len(live) / read if read else float(known)

    def heir(self, path: str, me: str, *, read: bool = True) -> Peer | None:
        """Who fetches ``path`` from the Hub now that its owner will not publish it: of this host (``me``) and
        the live peers with Hub access that may still fetch it (not failed, not done: a done peer that held
        it would be a holder), the one ranked first by ``heir_rank`` (the same ranking on every host, so they
        agree but for peers one of them dropped already). None: this host. The peer chosen is read in this
        look (once; not with ``read`` False): found hung, failed or done, the next one is chosen."""
        while True:
            able = [p for p in self.peers if p.hub and p.dropped is None and p.state not in ("done", "failed")
                    and path not in p.failed]
            best = max(able, key=lambda p: heir_rank(path, p.name), default=None)
            if best is None or heir_rank(path, me) > heir_rank(path, best.name):
                return None
            if not read or not self._booked([best]):
                return best
            self.refresh_status(best)

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
