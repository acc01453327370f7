# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 23, the follow-up: what a host fetches next and from whom at 64-256 hosts. Each batch is cut from
the source's order asked again (files a peer holds before files that only wait; a peer source runs in lanes:
rounds.Round fills a slot as soon as one frees, test_round_lanes.py), a file goes first to the hosts
placed first for it (FANOUT per holder, the holders a host has not read yet estimated), and a gone owner's
file has one heir that fetches it from the Hub while the others wait for it. No network: the peers are
fixtures/fake_peers.py, driven by the calls, never by wall-clock time."""
from __future__ import annotations

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peerbook as _peerbook
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peers as _peers
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import rounds as _rounds
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.source import Resolution
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.fake_peers import FakePeers

TOKEN = "t" * 48
BIG = _rounds.SMALL_FILE + 1


class _Item(object):
    def __init__(self, path, size=10):
        self.remote = _hub.RemoteFile(path=path, size=size, blob_id="b" * 40, sha256="c" * 64, lfs=True)
        self.key = path


class _Hub(object):
    send_token = False
    token = None

    def __init__(self):
        self.asked = []

    def resolve(self, items):
        self.asked += [item.remote.path for item in items]
        return [(item, Resolution("https://hub/" + item.remote.path)) for item in items]


def _source(fake, count, *, me="gpu0", hub=None, hub_share=(), owner_of=None):
    peers = [_peers.Peer(name="gpu%d" % i, url="http://10.0.0.%d:8370/m/c/" % i, hub=True,
                         share=frozenset((owner_of or {}).get("gpu%d" % i, ()))) for i in range(1, count + 1)]
    source = _peers.PeerSource(peers, token=TOKEN, hub=hub, hub_share=set(hub_share), wait_timeout=3600, timeout=60,
                               opener=fake, log=lambda msg: None, sleep=lambda s: None, seed=me)
    return source, peers


def test_next_batch_asks_the_source_order_again():
    class Ordered(object):
        def __init__(self):
            self.calls = 0

        def queue(self, items):
            self.calls += 1
            return list(reversed(items))

    items = [_Item("f%d" % i, BIG) for i in range(10)]
    source = Ordered()
    chunk = _rounds.next_batch(items, source, 2)
    assert [i.key for i in chunk] == ["f9", "f8"] and source.calls == 1  # parallel_files large files, its order
    assert [i.key for i in _rounds.next_batch(items, object(), 2)] == ["f0", "f1"]  # a Hub source: as batches() cuts
    assert _rounds.next_batch([], source, 2) == []
    assert _peers.PeerSource.lanes is True  # a peer source's rounds run in lanes


def test_the_queue_puts_the_own_share_then_files_a_peer_holds_then_the_rest():
    fake = FakePeers()
    fake.status("gpu1", "fetching", held={"held": 10})
    fake.status("gpu2", "fetching", held={})
    source, peers = _source(fake, 2, hub=_Hub(), hub_share=["own"])
    items = [_Item(p) for p in ("a", "b", "held", "own", "c")]
    assert [i.key for i in source.queue(items)][:1] == ["own"]
    source.book.new_look()
    source.book.holders(items)  # the look: gpu1 lists it
    assert [i.key for i in source.queue(items)][:2] == ["own", "held"]
    assert fake.counts() == {"GET": 2}  # queue itself asks nobody


def _paths_placed(book, me, *, low, want):
    """Paths for which ``me`` is placed below ``low`` (want True) or at ``low`` or later (want False)."""
    return [p for p in ("f%03d" % i for i in range(400)) if (book.place(p, me) < low) == want][:1]


def test_a_file_held_by_few_goes_to_the_hosts_placed_first_for_it():
    """40 hosts, one holder: the 8 (FANOUT) placed first take it now, the others wait for more holders; the
    place is the same on every host (a hash of path and name), different from file to file."""
    count = 39
    fake = FakePeers()
    source, peers = _source(fake, count)
    book = source.book
    [early] = _paths_placed(book, "gpu0", low=_peers.FANOUT, want=True)
    [late] = _paths_placed(book, "gpu0", low=2 * _peers.FANOUT, want=False)
    for i in range(1, count + 1):
        fake.status("gpu%d" % i, "fetching", held={early: 10, late: 10} if i == 1 else {})
    for dummy in range(-(-count // _peerbook.SAMPLE)):  # every peer read once: the estimate is the count
        book.new_look()
        book.holders([_Item(early)])
    assert book.estimate(1) == 1.0
    [(dummy, now)] = source.resolve([_Item(early)])
    [(dummy, later)] = source.resolve([_Item(late)])
    assert now.url.startswith(peers[0].url) and later.wait and later.url is None
    # the same places from any host: each host's own place, counted by every host alike
    ranks = sorted(["gpu%d" % i for i in range(count + 1)], key=lambda n: -_peerbook.heir_rank(late, n))
    assert ranks.index("gpu0") == book.place(late, "gpu0") >= 2 * _peers.FANOUT
    fake.status("gpu2", "fetching", held={late: 10})  # a second holder is not enough for a place of 16 or more
    book.new_look()
    book.refresh_status(peers[1])
    [(dummy, still)] = source.resolve([_Item(late)])
    assert still.wait == (book.place(late, "gpu0") >= 2 * _peers.FANOUT)


def test_the_estimate_scales_the_holders_known_to_the_peers_not_read_yet():
    fake = FakePeers()
    for i in range(1, 41):
        fake.status("gpu%d" % i, "fetching", held={"f": 10} if i % 2 else {})
    source, peers = _source(fake, 40)
    source.book.new_look()
    found = source.book.holders([_Item("f")])  # 12 of 40 read (the rotation)
    read = sum(1 for p in peers if p.held is not None)
    assert read == _peerbook.SAMPLE
    assert source.book.estimate(len(found["f"])) == len(found["f"]) * 40 / read


def _orphan(names, *, heir):
    """A path whose heir (the highest heir_rank of ``names``) is ``heir``."""
    for i in range(1000):
        path = "o%03d" % i
        if max(names, key=lambda n: _peerbook.heir_rank(path, n)) == heir:
            return path
    raise AssertionError("no such path")


def test_a_gone_owners_file_is_fetched_from_the_hub_by_its_heir_alone():
    """gpu3 owns the file and is gone (hung): the host ranked first for the file among the others fetches
    it from the Hub; the others wait for it (one Hub copy, not one per host), then take it from it."""
    names = ["gpu0", "gpu1", "gpu2"]
    for me, heir in (("gpu0", "gpu0"), ("gpu0", "gpu1")):
        fake = FakePeers()
        path = _orphan(names, heir=heir)
        fake.hung("gpu3")
        for name in ("gpu1", "gpu2"):
            fake.status(name, "fetching", held={})
        hub = _Hub()
        source, peers = _source(fake, 3, me=me, hub=hub, owner_of={"gpu3": [path]})
        [(dummy, res)] = source.resolve([_Item(path)])
        assert [d["name"] for d in source.dropped()] == ["gpu3"]
        if heir == me:
            assert hub.asked == [path] and res.url == "https://hub/" + path
            assert [i.key for i in source.queue([_Item("x"), _Item(path)])][0] == path  # taken first: others wait
            continue
        assert res.wait and hub.asked == []
        fake.status(heir, "fetching", held={path: 10})  # the heir placed it
        [(dummy, res)] = source.resolve([_Item(path)])
        assert res.url.startswith(peers[int(heir[3:]) - 1].url) and hub.asked == []


def test_an_heir_found_hung_or_failed_passes_the_file_on():
    names = ["gpu0", "gpu1", "gpu2"]
    path = next(p for p in ("o%03d" % i for i in range(2000))
                if sorted(names, key=lambda n: -_peerbook.heir_rank(p, n)) == ["gpu1", "gpu2", "gpu0"])
    fake = FakePeers()
    fake.hung("gpu3")
    fake.hung("gpu1")  # the first heir: hung too
    fake.status("gpu2", "failed", held={})  # the second: failed
    hub = _Hub()
    source, peers = _source(fake, 3, hub=hub, owner_of={"gpu3": [path]})
    [(dummy, res)] = source.resolve([_Item(path)])
    assert sorted(d["name"] for d in source.dropped()) == ["gpu1", "gpu3"]
    assert hub.asked == [path] and res.url == "https://hub/" + path  # this host, third, fetches it


def test_without_its_own_name_a_host_has_no_heirs_and_no_waves():
    fake = FakePeers()
    fake.hung("gpu1")
    hub = _Hub()
    peers = [_peers.Peer(name="gpu1", url="http://10.0.0.1:8370/m/c/", hub=True, share=frozenset(["f"]))]
    source = _peers.PeerSource(peers, token=TOKEN, hub=hub, hub_share=set(), wait_timeout=3600, timeout=60, opener=fake,
                               log=lambda msg: None, sleep=lambda s: None)
    assert source.name is None and source._first_wave("f", 0)
    [(dummy, res)] = source.resolve([_Item("f")])
    assert hub.asked == ["f"]  # its owner is gone: from the Hub at once, as before


def test_peers_dropped_or_failed_are_not_counted_in_a_place_and_the_timeout_ends_the_waves():
    """The hosts placed before this one for a file are all gone: it is placed first and takes the file
    (otherwise nobody would); and once peer_wait_timeout passed nothing waits for a wave."""
    count = 39
    fake = FakePeers()
    now = [0.0]
    peers = [_peers.Peer(name="gpu%d" % i, url="http://10.0.0.%d:8370/m/c/" % i, hub=True, share=frozenset())
             for i in range(1, count + 1)]
    source = _peers.PeerSource(peers, token=TOKEN, hub=None, hub_share=set(), wait_timeout=100, timeout=60, opener=fake,
                               log=lambda msg: None, sleep=lambda s: None, seed="gpu0", clock=lambda: now[0])
    book = source.book
    [late] = _paths_placed(book, "gpu0", low=2 * _peers.FANOUT, want=False)
    assert not source._first_wave(late, 1)
    before = [p for p in peers if _peerbook.heir_rank(late, p.name) > _peerbook.heir_rank(late, "gpu0")]
    for n, peer in enumerate(before):
        if n % 2:
            peer.dropped = "gone"
        else:
            peer.state = "failed"
    assert book.place(late, "gpu0") == 0 and source._first_wave(late, 1)
    for peer in before:
        peer.dropped, peer.state = None, "fetching"
    assert not source._first_wave(late, 1)
    now[0] = 100.0
    assert source._first_wave(late, 1)
