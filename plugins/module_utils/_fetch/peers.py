# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The peer source: files of a commit from the other hosts of a fleet, the Hub last.

Private to the collection: not a public API, may change without notice.

Every host fetches its share (``hub_share``) from the Hub and publishes each verified file through
its peer server (peer_serve: nginx, a bearer token). ``PeerSource`` is a _transfer source like
HubSource: for each pending file it asks every live peer (``HEAD`` with the token: 200 with the
listing's size means it holds the file) and hands aria2 all holders at once as mirrors. A file no
peer holds yet is waited for (not a failed try) while its owner, the peer whose share lists it, is
alive and its peer-status says it is still fetching; once the owner is gone, done or failed without
it, or ``peer_wait_timeout`` passed, the Hub serves it. With ``hub=false`` it waits on while a live
peer with Hub access still fetches (that peer takes the file from the Hub and publishes it), and fails
once none does.

A peer that refuses a connection, refuses the run's token (401/403), answers another error, or serves
bytes that fail the hash is dropped for the rest of the run. A passing fault (5xx, 429, a timeout, a
reset connection) is asked again with a backoff (``retry_wait`` doubled each time): a HEAD or status
read up to ``PEER_RETRIES`` more times at once, a file aria2 could not get from it in up to
``PEER_RETRIES`` more rounds (no try of the file used); only then is the peer dropped. Its token goes
only to peer URLs: HEADs here (no proxy, no redirect followed) and aria2's ``header=`` in its 0600
input file, never to the Hub nor on argv.

A file is credited (``credited``: the result's ``source`` and ``from_peers``) to a peer that served it
to its end, never to a mirror aria2 gave up on; the transfer credits only placed (verified) files, and
resumes a partial only from the sources that wrote it.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import re
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
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError, backoff
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import private_over_peers_message
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.transfer import Resolution

STATUS_FILE = "peer-status.json"
# "started": the role claimed this host's status for a run (peer_run) before its fetch starts.
STATES = ("started", "fetching", "done", "failed")
# Between two looks at the peers while files wait for their owners: short, so a published file is
# taken soon; bounded, so the peers are not hammered. Nothing waits on its exact length.
POLL_PAUSE = 1.0
HEAD_THREADS = 8
# A peer-status file is a few paths; anything bigger is not one.
MAX_STATUS_BYTES = 4 << 20
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,100}$")
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


def parse_peers(raw: Sequence[Any] | None, run: str | None = None) -> list[Peer]:
    """``peers`` as Peer objects; SnapshotError naming the bad entry and the fix."""
    peers = []
    for index, entry in enumerate(raw or []):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not isinstance(entry.get("url"), str):
            raise SnapshotError("peers entry %d must be a dict with name, url and share, got %s" % (index, _hub.shown(entry)))
        name, url, share = entry["name"], entry["url"], entry.get("share") or []
        if not _NAME.match(name):
            raise SnapshotError("peers entry %d: name %s must be a host name (letters, digits, . _ : -)" % (index, _hub.shown(name)))
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or not url.endswith("/") or parts.query or parts.fragment:
            raise SnapshotError("peers entry %d (%s): url %s must be an http(s) URL of the peer's copy of this commit "
                                "directory, ending in '/'" % (index, name, _hub.shown(url)))
        if not isinstance(share, list) or not all(isinstance(p, str) for p in share):
            raise SnapshotError("peers entry %d (%s): share must be a list of paths" % (index, name))
        if name in {p.name for p in peers}:
            raise SnapshotError("peers entry %d: name %s is given twice" % (index, name))
        hub = entry.get("hub", bool(share))
        if not isinstance(hub, bool):
            raise SnapshotError("peers entry %d (%s): hub must be true or false (whether that peer has Hub access), got %s"
                                % (index, name, _hub.shown(hub)))
        peers.append(Peer(name=name, url=url, share=frozenset(share), hub=hub, run=run))
    return peers


def write_status(dest: str, state: str, failed: Sequence[str] = (), run: str | None = None) -> None:
    """``<dest>/.gpufleet/peer-status.json``, atomically: what the peers read about this run (``run``: its id)."""
    os.makedirs(_manifest.meta_dir(dest), exist_ok=True)
    status: dict[str, Any] = {"state": state, "failed": sorted(failed)}
    if run is not None:
        status["run"] = run
    _manifest.atomic_write_json(os.path.join(_manifest.meta_dir(dest), STATUS_FILE), status)


def peer_opener(validate_certs: bool = True, ca_path: str | None = None) -> urllib.request.OpenerDirector:
    """No proxy (peers are on the cluster network; a proxy would see the token), no redirect followed."""
    handlers: list[Any] = [urllib.request.ProxyHandler({}), _hub.NoRedirect()]
    handlers.append(urllib.request.HTTPSHandler(context=_hub.ssl_context(validate_certs, ca_path)))
    return urllib.request.build_opener(*handlers)


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


class PeerSource(object):
    """A _transfer source: live peers first, the Hub (``hub``, a HubSource or None) last."""

    def __init__(self, peers: Sequence[Peer], *, token: str, hub: Any, hub_share: set[str] | None, wait_timeout: float,
                 timeout: float, opener: Any, log: Callable[[str], None], retry_wait: float = 1.0,
                 sleep: Callable[[float], Any] = time.sleep, private: bool = False, repo_id: str = "") -> None:
        self.peers = list(peers)
        self.peer_token = token
        self.hub = hub
        self.token = getattr(hub, "token", None)  # the Hub's, for masking in progress messages
        self.hub_share = hub_share  # None: every file is this host's own share
        self.deadline = time.monotonic() + wait_timeout
        self.timeout = timeout
        self.opener = opener
        self.log = log
        self.solo: set[str] = set()  # content keys to fetch from one peer at a time (a multi-peer mismatch)
        self.tried: dict[str, set[str]] = {}  # key -> peers a solo try used
        self.asked: set[str] = set()  # owners whose status this resolve already read (once each per look)
        # the backoff of a passing fault: base seconds (doubled each retry) and the wait itself (tests: no clock)
        self.retry_wait = retry_wait
        self.sleep = sleep
        self.backoff_due = 0.0  # a wait before the next round's resolve (a file's passing fault on a peer)
        # whether a repo that needs the token may travel over the peer exchange (hf_snapshot's peer_private)
        self.private = private
        self.repo_id = repo_id

    # -- what the peers say --------------------------------------------------------------------
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

    # -- the source interface ------------------------------------------------------------------
    def owner(self, path: str) -> Peer | None:
        for peer in self.peers:
            if path in peer.share:
                return peer
        return None

    def _owner_verdict(self, item: Any) -> str:
        """``wait`` (the owner may still publish it), ``hub`` (it will not), ``timeout``."""
        owner = self.owner(item.remote.path)
        if owner is None or owner.dropped is not None:
            return "hub"
        if owner.name not in self.asked:
            self.asked.add(owner.name)
            self.refresh_status(owner)
        if owner.dropped is not None or owner.state in ("done", "failed") or item.remote.path in owner.failed:
            return "hub"
        return "timeout" if time.monotonic() >= self.deadline else "wait"

    def _to_peers(self, item: Any, holding: list[Peer]) -> Resolution:
        if item.key in self.solo:
            # a mismatch from several peers at once: one peer at a time finds the bad one
            tried = self.tried.setdefault(item.key, set())
            fresh = [p for p in holding if p.name not in tried] or holding
            holding = fresh[:1]
            tried.add(holding[0].name)
        urls = [self.file_url(peer, item.remote.path) for peer in holding]
        return Resolution(urls[0], mirrors=tuple(urls[1:]), header="Authorization: Bearer %s" % self.peer_token,
                          origin="peer:%s" % holding[0].name)

    def _hub_peers_busy(self) -> bool:
        """Whether a live peer with Hub access (its ``hub``; even one with an empty share, e.g. more
        Hub hosts than files) is still fetching or has not started: it fetches a file whose owner failed
        from the Hub and publishes it. Hosts without Hub access do not count, or two of them would wait
        for each other."""
        busy = False
        for peer in self.peers:
            if peer.dropped is not None or not peer.hub:
                continue
            if peer.name not in self.asked:
                self.asked.add(peer.name)
                self.refresh_status(peer)
            busy = busy or (peer.dropped is None and peer.state in ("unknown", "fetching"))
        return busy

    def _no_hub(self, item: Any, verdict: str) -> Resolution:
        owner = self.owner(item.remote.path)
        why = ("its owner %s is %s" % (owner.name, owner.dropped or owner.state) if owner
               else "no peer's share lists it")
        if verdict == "timeout":
            why = "peer_wait_timeout passed while peers were still fetching"
        return Resolution(None, error="this host has no Hub access (hub=false) and no peer holds %s (%s): give the host "
                                      "Hub access or a peer that fetches the file" % (item.remote.path, why), final=True)

    def resolve(self, items: Sequence[Any]) -> list[tuple[Any, Resolution]]:
        if self.backoff_due:
            # a peer's passing fault on a file last round: give it its backoff before it is asked again
            wait, self.backoff_due = self.backoff_due, 0.0
            self.sleep(wait)
        found = self.holders(items)
        self.asked = set()
        out: list[tuple[Any, Resolution]] = []
        to_hub = []
        for item in items:
            path = item.remote.path
            holding = [p for p in found[path] if p.dropped is None]
            if holding:
                out.append((item, self._to_peers(item, holding)))
                continue
            own = self.hub_share is None or path in self.hub_share
            verdict = "hub" if own else self._owner_verdict(item)
            if verdict == "hub" and not own:
                # the owner just finished: one more look, so a file published in between is not taken from the Hub
                holding = [p for p in self.holders([item])[path] if p.dropped is None]
                if holding:
                    out.append((item, self._to_peers(item, holding)))
                    continue
            if verdict == "wait":
                out.append((item, Resolution(None, wait=True)))
            elif self.hub is None and verdict == "hub" and self._hub_peers_busy():
                # its owner will not publish it, but a host with Hub access that still fetches takes
                # it from the Hub for itself and then publishes it: wait for that, not fail now
                out.append((item, Resolution(None, wait=True) if time.monotonic() < self.deadline
                            else self._no_hub(item, "timeout")))
            elif self.hub is None and verdict == "hub" and not own:
                # none is busy any more: a peer publishes before it says done, so one last look decides
                holding = [p for p in self.holders([item])[path] if p.dropped is None]
                out.append((item, self._to_peers(item, holding) if holding else self._no_hub(item, verdict)))
            elif self.hub is None:
                out.append((item, self._no_hub(item, verdict)))
            else:
                to_hub.append(item)
        if to_hub:
            answers = self.hub.resolve(to_hub)
            if getattr(self.hub, "send_token", False) and not self.private:
                # the Hub refused a file without the token: a private or gated repo, which the listing
                # handed over did not say (listing_token_required); nothing more travels over the peers
                raise SnapshotError(private_over_peers_message(self.repo_id))
            out.extend(answers)
        return out

    def download(self, url: str, out_path: str, size: int | None = None) -> None:
        # direct downloads are the Hub's own (gated repos' small files); peers always go through aria2
        self.hub.download(url, out_path, size)

    def settled(self, item: Any, res: Resolution, *, uri_errors: Mapping[str, Any], mismatch: bool,
                failed: bool = True) -> bool:
        """After aria2: drop each peer whose URI failed for good; one whose URI had a passing fault
        (5xx, 429, timeout, reset) gets a strike and a backoff when the file failed, and is dropped only
        after PEER_RETRIES more rounds; nothing when aria2 got the file after all (``failed`` False). A
        hash mismatch drops a lone peer at once (wrong bytes are no passing fault), or makes the file go
        one peer at a time when several served it. True when a peer was to blame (dropped, struck, or
        the file goes one peer at a time from now on): the transfer counts no try for it."""
        if not res.origin.startswith("peer:") or res.url is None:
            return False
        urls = (res.url,) + tuple(res.mirrors)
        blamed = False
        for url in urls:
            peer = self._peer_of(url)
            if url not in uri_errors:
                if not failed:
                    peer.strikes = 0
                continue
            code, message, status = uri_errors[url]
            reason = "GET %s: aria2 error %s: %s" % (item.remote.path, code, message)
            if not passing_uri_error(code, message, status):
                self.drop(peer, reason)
                blamed = True
            elif not failed:
                peer.strikes = 0  # aria2 asked again itself and got the file: a passing fault indeed
            elif peer.dropped is None:
                peer.strikes += 1
                blamed = True
                if peer.strikes > PEER_RETRIES:
                    self.drop(peer, "%s (%d rounds in a row)" % (reason, peer.strikes))
                else:
                    self.backoff_due = max(self.backoff_due, backoff(self.retry_wait, peer.strikes))
                    self.log("peer %s: %s; asked again next round (%d/%d)" % (peer.name, reason, peer.strikes, PEER_RETRIES))
        if mismatch and len(urls) == 1:
            self.drop(self._peer_of(urls[0]), "served bytes of %s that fail its hash" % item.remote.path)
            blamed = True
        elif mismatch:
            blamed = item.key not in self.solo
            self.solo.add(item.key)
        return blamed

    def credited(self, res: Resolution, uri_errors: Mapping[str, Any]) -> str:
        """The origin of a file aria2 finished from ``res``: of its peers, the first whose URI did not
        fail (it served the file to its end), else the first that failed only passingly (aria2 asked it
        again and got the file), else ``res.origin``. The Hub's files stay the Hub's."""
        if not res.origin.startswith("peer:") or res.url is None:
            return res.origin
        urls = (res.url,) + tuple(res.mirrors)
        for url in urls:
            if url not in uri_errors:
                return "peer:%s" % self._peer_of(url).name
        for url in urls:
            if passing_uri_error(*uri_errors[url]):
                return "peer:%s" % self._peer_of(url).name
        return res.origin

    def _peer_of(self, url: str) -> Peer:
        return max((p for p in self.peers if url.startswith(p.url)), key=lambda p: len(p.url))

    def pause(self) -> None:
        time.sleep(POLL_PAUSE)

    def dropped(self) -> list[dict[str, str]]:
        return [{"name": p.name, "reason": p.dropped} for p in self.peers if p.dropped is not None]


def _failure(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return "HTTP %d" % exc.code
    reason = getattr(exc, "reason", exc)
    return "%s: %s" % (type(reason).__name__, reason)


def _tries(exc: BaseException) -> str:
    return " (%d tries)" % (PEER_RETRIES + 1) if passing(exc) else ""


def planned_source(path: str, *, peers: Sequence[Peer], hub_share: set[str] | None) -> str:
    """Check mode: where a file to fetch would come from, without asking anyone."""
    if hub_share is None or path in hub_share:
        return "hub"
    for peer in peers:
        if path in peer.share:
            return "peer:%s" % peer.name
    return "hub"
