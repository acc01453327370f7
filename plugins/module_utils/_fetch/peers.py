# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The peer source: files of a commit from the other hosts of a fleet, the Hub last.

Private to the collection: not a public API, may change without notice.

Every host fetches its share (``hub_share``) from the Hub and publishes each verified file through
its peer server (peer_serve: nginx, a bearer token), and lists it in its peer-status (``held``) as soon
as it is placed (``placed``: the transfer tells the source, the run rewrites the status atomically), so
every host re-serves what it has verified and the swarm grows as the stage goes. ``PeerSource`` is a
_transfer source like HubSource: for each pending file it takes the holders its book knows (the peers'
status files, ``peerbook``) and hands aria2 all of them at once as mirrors, in this host's own order. A file no
peer holds yet is waited for (not a failed try) while its owner, the peer whose share lists it, is
alive and its peer-status says it is still fetching; once the owner is gone, done or failed without
it, or ``peer_wait_timeout`` passed, the Hub serves it. With ``hub=false`` it waits on while a live
peer with Hub access still fetches (that peer takes the file from the Hub and publishes it), and fails
once none does.

What it knows of the peers is its ``peerbook.PeerBook``: who holds which file (a HEAD with the
token), who is live (their peer-status; a peer that fails for good, or passingly PEER_RETRIES more times,
is dropped for the rest of the run), and which peer served a file to its end (the result's ``source``
and ``from_peers``: never a mirror aria2 gave up on). The transfer credits only placed (verified)
files, and resumes a partial only from the sources that wrote it. The peers' token goes only to peer
URLs, never to the Hub nor on argv.
"""

from __future__ import annotations

import os
import re
import socket
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import private_over_peers_message
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peerbook as _peerbook
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.peerbook import STATUS_FILE, Peer, PeerBook
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.rounds import SMALL_FILE
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.source import Resolution

# Between two looks at the peers while files wait for their owners: short, so a published file is
# taken soon; doubled after each look that showed nothing new, up to POLL_PAUSE_MAX, so the peers are
# not hammered; back to POLL_PAUSE once a look shows something. Nothing waits on its exact length.
POLL_PAUSE = 1.0
POLL_PAUSE_MAX = 4.0
# Hosts that may take a file at once per peer holding it (_first_wave): each of a holder's downloads then
# gets at least 1/FANOUT of its uplink, and the swarm of a file multiplies by up to FANOUT + 1 per copy.
FANOUT = 8
# Hub turns (_turn_due): the files of every host's Hub share in one fleet-wide order (the same on every host);
# a host starts a large file of its own share once fewer than HUB_TURNS of the files before it are still to
# come (not published, and their owner still fetching), so the Hub's bandwidth goes to a few files at a time and the first copies are out in moments, for
# the peers to spread while the Hub still sends the rest, instead of every share completing together.
HUB_TURNS = 24
_TURN_SALT = "hub-turn"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,100}$")


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


def status_document(state: str, failed: Sequence[str] = (), run: str | None = None,
                    held: Mapping[str, int] | None = None) -> dict[str, Any]:
    """What a peer-status file says: the state, the files failed, the run's id, and ``held`` ({path: size}:
    the files this host verified and placed, which its peer server serves)."""
    status: dict[str, Any] = {"state": state, "failed": sorted(failed)}
    if run is not None:
        status["run"] = run
    if held is not None:
        status["held"] = dict(sorted(held.items()))
    return status


def write_status(dest: str, state: str, failed: Sequence[str] = (), run: str | None = None,
                 held: Mapping[str, int] | None = None) -> None:
    """``<dest>/.gpufleet/peer-status.json``, atomically: what the peers read about this run (``run``: its id)."""
    os.makedirs(_manifest.meta_dir(dest), exist_ok=True)
    _manifest.atomic_write_json(os.path.join(_manifest.meta_dir(dest), STATUS_FILE),
                                status_document(state, failed, run, held))


def peer_opener(validate_certs: bool = True, ca_path: str | None = None) -> urllib.request.OpenerDirector:
    """No proxy (peers are on the cluster network; a proxy would see the token), no redirect followed."""
    handlers: list[Any] = [urllib.request.ProxyHandler({}), _hub.NoRedirect()]
    handlers.append(urllib.request.HTTPSHandler(context=_hub.ssl_context(validate_certs, ca_path)))
    return urllib.request.build_opener(*handlers)


class PeerSource(object):
    """A _transfer source: live peers first, the Hub (``hub``, a HubSource or None) last.

    What it knows of the peers (who holds a file, who is live, who served it) is its ``book``; what it
    decides here is where each file comes from this round, and what a failure costs.
    """

    # rounds.Round runs a peer source's files in lanes: each look's files in their own aria2c, a slot filled
    # as soon as a large file completes, from this source's order asked again then (a HubSource's files keep
    # their batches, one aria2c each)
    lanes = True

    def __init__(self, peers: Sequence[Peer], *, token: str, hub: Any, hub_share: set[str] | None, wait_timeout: float,
                 timeout: float, opener: Any, log: Callable[[str], None], retry_wait: float = 1.0,
                 sleep: Callable[[float], Any] = time.sleep, private: bool = False, repo_id: str = "",
                 seed: str | None = None, clock: Callable[[], float] = time.monotonic,
                 publish: Callable[[Sequence[tuple[str, int]]], None] | None = None) -> None:
        # seed: this host's name (its status reads' rotation and mirror order); clock: the deadline's
        # (the bench's virtual one); publish: lists placed files in this host's peer-status
        self.book = PeerBook(peers, token=token, timeout=timeout, opener=opener, log=log, retry_wait=retry_wait,
                             sleep=sleep, seed=socket.gethostname() if seed is None else seed)
        self.clock = clock
        self.publish = publish
        # this host's name among the peers' (hf_snapshot's peer_name): without it, no heirs (a gone owner's
        # files come from the Hub at once, on every host that needs them)
        self.name = seed
        self.poll_wait = POLL_PAUSE
        self.peer_token = token  # the peers' token, for masking in progress messages
        self.hub = hub
        self.token = getattr(hub, "token", None)  # the Hub's, for masking in progress messages
        self.hub_share = hub_share  # None: every file is this host's own share
        self.deadline = clock() + wait_timeout
        self.solo: set[str] = set()  # content keys to fetch from one peer at a time (a multi-peer mismatch)
        self.tried: dict[str, set[str]] = {}  # key -> peers a solo try used
        self.sleep = sleep
        self.backoff_due = 0.0  # a wait before the next round's resolve (a file's passing fault on a peer)
        # whether a repo that needs the token may travel over the peer exchange (hf_snapshot's peer_private)
        self.private = private
        self.repo_id = repo_id
        self.turns: list[str] | None = None  # every Hub share's files in the fleet's order (_turn_order)
        self.turn_of: dict[str, int] = {}  # path -> its place in it
        self.mine: set[str] = set()  # paths this run placed (``placed``)

    def _owner_verdict(self, item: Any) -> str:
        """``wait`` (the owner may still publish it), ``hub`` (it will not), ``timeout``."""
        if not self.book.owner_may_publish(item.remote.path):
            return "hub"
        return "timeout" if self.clock() >= self.deadline else "wait"

    def _first_wave(self, path: str, holders: int) -> bool:
        """Whether this host takes ``path`` from the ``holders`` it knows now: its place in the file's ranking of
        the hosts (``PeerBook.place``, the same on every host) is below FANOUT per holder (those it knows, scaled
        to the peers it has not read yet: ``PeerBook.estimate``). A file held by few peers goes to
        a few hosts at a time, each at a good share of the holders' uplinks, and they serve it on once placed;
        all hosts at once would share the same uplinks and finish together, late, none serving it meanwhile."""
        if self.name is None or self.clock() >= self.deadline:
            return True  # no name to be placed by; or peer_wait_timeout passed: no more waiting for anyone
        return self.book.place(path, self.name) < FANOUT * self.book.estimate(holders)

    def _turn_order(self) -> list[str]:
        """Every file of every host's Hub share (the peers' shares and this host's), in one order: a hash of the
        path (``heir_rank`` with a fixed salt), so every host computes the same order from the same shares."""
        if self.turns is None:
            paths = set(self.hub_share or ())
            for peer in self.book.peers:
                paths.update(peer.share)
            self.turns = sorted(paths, key=lambda path: (_peerbook.heir_rank(path, _TURN_SALT), path))
            self.turn_of = {path: n for n, path in enumerate(self.turns)}
        return self.turns

    def _turn_due(self, path: str) -> bool:
        """Whether this host starts ``path``, a large file of its own Hub share, now: once fewer than HUB_TURNS of
        the files before it in the fleet's order (``_turn_order``) are still to come, a file counting as come
        once a live peer lists it, or this host placed it, or it will not come (its owner gone, done or failed
        without it, or publishing no list to tell). So one owner that is slow to publish (a Hub route that
        fails and retries) holds no turn back: the next turns go on with one file fewer at the Hub. Without a
        name (no peer_name), or once peer_wait_timeout passed, every turn is due. What the book knows decides,
        plus the status of the owner of the file HUB_TURNS places before it, read in this look (one of the
        reads a decision needs, within STATUS_READS)."""
        if self.name is None or self.clock() >= self.deadline:
            return True
        order = self._turn_order()
        place = self.turn_of.get(path)
        if place is None or place < HUB_TURNS:
            return True
        owner = self.book.owner(order[place - HUB_TURNS])
        if owner is not None and owner.dropped is None:
            self.book.look_at(owner)
        held = set()
        for peer in self.book.peers:
            if peer.dropped is None and peer.held is not None:
                held.update(peer.held)
        to_come = 0
        for ahead in order[:place]:
            if ahead in self.mine or ahead in held:
                continue
            owner = self.book.owner(ahead)
            if owner is None:
                to_come += 1  # this host's own, not placed yet
            elif not (self.book.orphaned(ahead) or (owner.read and owner.held is None)):
                to_come += 1  # its owner may still publish it (or is not read yet: what it holds is unknown)
            if to_come >= HUB_TURNS:
                return False
        return True

    def _held_back(self, items: Sequence[Any]) -> dict[str, Any]:
        """The files of a look that wait for a later one: the large files of this host's own Hub share whose turn
        is not due yet (``_turn_due``); and when one of them is due, every file of the look not of its share, so
        the Hub file has the host's downlink to itself but for the lanes already running, and is published
        the sooner. Its own share comes first in ``queue``, so the others go at the next look."""
        if self.name is None or self.hub_share is None:
            return {}
        own = [item for item in items if item.remote.path in self.hub_share and item.remote.size > SMALL_FILE]
        back = {item.key: item for item in own if not self._turn_due(item.remote.path)}
        if len(back) < len(own):
            back.update((item.key, item) for item in items if item.remote.path not in self.hub_share)
        return back

    def _heir_of(self, item: Any) -> bool:
        """Whether this host is the heir of ``item`` by what its book knows (no request): its queue takes it
        first, as its own share, since the other hosts wait for it."""
        path = item.remote.path
        return (self.hub is not None and self.name is not None and self.book.orphaned(path)
                and not self.book.known_holders(path, item.remote.size) and self.book.heir(path, self.name, read=False) is None)

    def _heir_verdict(self, item: Any) -> str:
        """Its owner will not publish ``item``: ``hub`` when this host is its heir (``PeerBook.heir``: one host
        per file fetches it from the Hub, so a gone owner costs one more Hub copy of its share, not one per
        host), else ``wait`` for the heir to publish it (``hub`` once peer_wait_timeout passed)."""
        if self.book.heir(item.remote.path, self.name) is None:
            return "hub"
        return "hub" if self.clock() >= self.deadline else "wait"

    def _to_peers(self, item: Any, holding: list[Peer]) -> Resolution:
        if not self._first_wave(item.remote.path, len(holding)):
            return Resolution(None, wait=True)  # its holders serve the hosts placed before this one first
        if item.key in self.solo:
            # a mismatch from several peers at once: one peer at a time finds the bad one
            tried = self.tried.setdefault(item.key, set())
            fresh = [p for p in holding if p.name not in tried] or holding
            # in this host's shuffled order (not every host at the same peer), the first mirror of the failed try first
            holding = sorted(fresh, key=lambda p: p.rank)[:1]
            tried.add(holding[0].name)
        holding = self.book.order(holding)
        holding[0].asked_for += 1
        urls = [self.book.file_url(peer, item.remote.path) for peer in holding]
        return Resolution(urls[0], mirrors=tuple(urls[1:]), header="Authorization: Bearer %s" % self.peer_token,
                          origin="peer:%s" % holding[0].name)

    def _no_hub(self, item: Any, verdict: str) -> Resolution:
        owner = self.book.owner(item.remote.path)
        why = ("its owner %s is %s" % (owner.name, owner.dropped or owner.state) if owner
               else "no peer's share lists it")
        if verdict == "timeout":
            why = "peer_wait_timeout passed while peers were still fetching"
        return Resolution(None, error="this host has no Hub access (hub=false) and no peer holds %s (%s): give the host "
                                      "Hub access or a peer that fetches the file" % (item.remote.path, why), final=True)

    def _live_holders(self, item: Any) -> list[Peer]:
        """One more look at who holds ``item`` now."""
        return [p for p in self.book.holders([item])[item.remote.path] if p.dropped is None]

    def resolve(self, items: Sequence[Any]) -> list[tuple[Any, Resolution]]:
        if self.backoff_due:
            # a peer's passing fault on a file last round: give it its backoff before it is asked again
            wait, self.backoff_due = self.backoff_due, 0.0
            self.sleep(wait)
        self.book.new_look()
        held_back = self._held_back(items)
        items = [item for item in items if item.key not in held_back]
        found = self.book.holders(items)
        out: list[tuple[Any, Resolution]] = [(item, Resolution(None, wait=True)) for item in held_back.values()]
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
                holding = self._live_holders(item)
                if holding:
                    out.append((item, self._to_peers(item, holding)))
                    continue
            if verdict == "hub" and not own and self.hub is not None and self.name is not None:
                verdict = self._heir_verdict(item)
                holding = self.book.known_holders(path, item.remote.size) if verdict == "wait" else []
                if holding:
                    out.append((item, self._to_peers(item, holding)))
                    continue
            if verdict == "wait":
                # the verdict read the owner's status: a file it placed since this look's survey goes now
                holding = self.book.known_holders(path, item.remote.size)
                out.append((item, self._to_peers(item, holding) if holding else Resolution(None, wait=True)))
            elif self.hub is None and verdict == "hub" and self.book.hub_peers_busy():
                # its owner will not publish it, but a host with Hub access that still fetches takes
                # it from the Hub for itself and then publishes it: wait for that, not fail now
                out.append((item, Resolution(None, wait=True) if self.clock() < self.deadline
                            else self._no_hub(item, "timeout")))
            elif self.hub is None and verdict == "hub" and not own:
                # none is busy any more: a peer publishes before it says done, so one last look decides
                holding = self._live_holders(item)
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
            to_blame, wait = self.book.uri_settled(url, uri_errors[url] if url in uri_errors else None,
                                                   path=item.remote.path, failed=failed)
            blamed = blamed or to_blame
            self.backoff_due = max(self.backoff_due, wait)
        if mismatch and len(urls) == 1:
            self.book.drop(self.book.peer_of(urls[0]), "served bytes of %s that fail its hash" % item.remote.path)
            # the bad one is found (and dropped): the file goes to all its holders again (another bad one
            # among them makes it go one at a time again)
            self.solo.discard(item.key)
            blamed = True
        elif mismatch:
            blamed = item.key not in self.solo
            self.solo.add(item.key)
        return blamed

    def credited(self, res: Resolution, uri_errors: Mapping[str, Any]) -> str:
        """The origin of a file aria2 finished from ``res``: the peer the book credits (one that served
        it to its end, else one that failed only passingly), else ``res.origin``. The Hub's files stay
        the Hub's."""
        if not res.origin.startswith("peer:") or res.url is None:
            return res.origin
        peer = self.book.credit((res.url,) + tuple(res.mirrors), uri_errors)
        return "peer:%s" % peer.name if peer is not None else res.origin

    def poll_pause(self) -> float:
        """The pause before the next look while files wait: POLL_PAUSE after a look that showed something new
        (a state, a file held), else the last pause doubled, up to POLL_PAUSE_MAX. rounds.Round waits it out
        itself while its lanes still download."""
        if self.book.changed:
            self.poll_wait = POLL_PAUSE
        else:
            self.poll_wait = min(POLL_PAUSE_MAX, self.poll_wait * 2)
        self.book.changed = False
        return self.poll_wait

    def pause(self) -> None:
        """Between two rounds while files wait (nothing downloads): ``poll_pause``, slept."""
        self.sleep(self.poll_pause())

    def queue(self, items: Sequence[Any]) -> list[Any]:
        """The order this host fetches ``items`` in: its own Hub share first (the others wait for it), then the
        files a live peer holds by what the book knows (no request: its earlier looks), then the rest; each
        part in this host's shuffled order (seeded by its name), so hosts do not all want the same file
        first, and a look is not spent on files that only wait while others could download."""
        rank = {path: n for n, path in enumerate(_peerbook.shuffled([it.remote.path for it in items], self.book.seed))}

        def key(item: Any) -> tuple[int, int]:
            if self.hub_share is None or item.remote.path in self.hub_share or self._heir_of(item):
                return (0, rank[item.remote.path])
            held = len(self.book.known_holders(item.remote.path, item.remote.size))
            return (1 if held and self._first_wave(item.remote.path, held) else 2 if held else 3, rank[item.remote.path])
        return sorted(items, key=key)

    def placed(self, item: Any) -> None:
        """``item`` is verified and in place: this host serves it from now on, and says so in its status."""
        self.mine.add(item.remote.path)
        if self.publish is not None:
            self.publish([(item.remote.path, item.remote.size)])

    def dropped(self) -> list[dict[str, str]]:
        return self.book.dropped()


def planned_source(path: str, *, peers: Sequence[Peer], hub_share: set[str] | None) -> str:
    """Check mode: where a file to fetch would come from, without asking anyone."""
    if hub_share is None or path in hub_share:
        return "hub"
    for peer in peers:
        if path in peer.share:
            return "peer:%s" % peer.name
    return "hub"
