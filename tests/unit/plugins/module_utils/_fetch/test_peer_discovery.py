# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 23: discovery through the peers' status files (``held``), the rotation past STATUS_READS peers,
the per-host mirror order, the polls' back-off and a hung peer's requests, without a network: the
peers are a fake opener (fixtures/fake_peers.py) that answers each request from a dict and counts it."""
from __future__ import annotations

import json

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peerbook as _peerbook
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peers as _peers
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.fake_peers import FakePeers

TOKEN = "t" * 48


class _Item(object):
    def __init__(self, path, size=10):
        self.remote = _hub.RemoteFile(path=path, size=size, blob_id="b" * 40, sha256="c" * 64, lfs=True)
        self.key = path


def _source(fake, count, *, seed="gpu0", waits=None, log=None):
    peers = [_peers.Peer(name="gpu%d" % i, url="http://10.0.0.%d:8370/m/c/" % i, share=frozenset()) for i in range(1, count + 1)]
    source = _peers.PeerSource(peers, token=TOKEN, hub=None, hub_share=set(), wait_timeout=3600, timeout=60,
                               opener=fake, log=(log.append if log is not None else lambda msg: None),
                               sleep=(waits.append if waits is not None else lambda s: None), seed=seed)
    return source, peers


def test_a_look_reads_one_status_per_peer_and_sends_no_head():
    fake = FakePeers()
    items = [_Item("f%02d" % i) for i in range(80)]
    for i in range(1, 4):
        fake.status("gpu%d" % i, "fetching", held={"f%02d" % n: 10 for n in range(i, 80, 3)})
    source, peers = _source(fake, 3)
    found = source.book.holders(items)
    assert fake.counts() == {"GET": 3}  # one status each, whatever the number of files
    assert [p.name for p in found["f01"]] == ["gpu1"] and [p.name for p in found["f03"]] == ["gpu3"]
    assert found["f00"] == [] and source.dropped() == []


def test_a_peer_listing_another_size_is_dropped():
    fake = FakePeers()
    fake.status("gpu1", "fetching", held={"f00": 11})
    source, peers = _source(fake, 1)
    assert source.book.holders([_Item("f00", size=10)]) == {"f00": []}
    assert source.dropped() == [{"name": "gpu1", "reason": "its peer-status lists f00 with 11 bytes, the listing says 10"}]


def test_a_held_list_that_is_no_map_of_sizes_drops_the_peer():
    fake = FakePeers()
    fake.raw_status("gpu1", json.dumps({"state": "fetching", "failed": [], "held": ["f00"]}).encode())
    source, peers = _source(fake, 1)
    source.book.holders([_Item("f00")])
    assert source.dropped() == [{"name": "gpu1", "reason": "peer-status is not a peer-status file"}]


def test_past_status_reads_a_look_reads_a_bounded_rotation_and_every_peer_in_turn():
    """256-host shape: 255 peers, 80 files. A look costs at most STATUS_READS requests (flat in N); in
    ceil(255 / SAMPLE) looks every peer was read once, and what a look did not read stays known."""
    fake = FakePeers()
    count = 255
    for i in range(1, count + 1):
        fake.status("gpu%d" % i, "fetching", held={"f%02d" % (i % 80): 10})
    source, peers = _source(fake, count)
    items = [_Item("f%02d" % i) for i in range(80)]
    looks = -(-count // _peerbook.SAMPLE)  # 32 looks of 8: 256 reads, so one peer twice
    for dummy in range(looks):
        before = sum(fake.counts().values())
        source.book.new_look()
        found = source.book.holders(items)
        assert sum(fake.counts().values()) - before <= _peerbook.STATUS_READS
    reads = fake.read_by_peer()
    assert set(reads) == {"gpu%d" % i for i in range(1, count + 1)} and sum(reads.values()) == looks * _peerbook.SAMPLE
    assert all(found[item.remote.path] for item in items)  # every file's holders known, from all looks together


def test_the_rotation_skips_peers_read_as_done():
    """A peer read as done holds all it ever will: the rotation spends its reads on the others."""
    fake = FakePeers()
    count = 40
    for i in range(1, count + 1):
        fake.status("gpu%d" % i, "done" if i <= 20 else "fetching", held={"f00": 10})
    source, peers = _source(fake, count)
    for dummy in range(10):
        source.book.new_look()
        source.book.holders([_Item("f00")])
    reads = fake.read_by_peer()
    done = [reads.get("gpu%d" % i, 0) for i in range(1, 21)]
    busy = [reads.get("gpu%d" % i, 0) for i in range(21, count + 1)]
    assert max(done) == 1 and min(busy) >= 4  # 10 looks x 12 reads: the done ones once, the others in turn


def test_the_rotation_and_the_mirror_order_are_shuffled_per_host_and_reproducible():
    names = ["gpu%d" % i for i in range(1, _peerbook.STATUS_READS + 1)]
    assert _peerbook.shuffled(names, "gpu30") == _peerbook.shuffled(list(reversed(names)), "gpu30")
    orders = {tuple(_peerbook.shuffled(names, "gpu%d" % host)) for host in range(25, 33)}
    assert len(orders) == 8  # eight hosts, eight orders
    fake = FakePeers()
    for name in names:
        fake.status(name, "done", held={"f00": 10})
    firsts = set()
    for host in range(25, 33):
        source, peers = _source(fake, len(names), seed="gpu%d" % host)
        source.book.new_look()
        holding = source.book.holders([_Item("f00")])["f00"]
        res = source._to_peers(_Item("f00"), holding)  # pylint: disable=protected-access
        assert len(res.mirrors) == len(names) - 1
        firsts.add(res.origin)
    assert len(firsts) >= 4  # not every host starts at the same holder (inventory order: all at gpu1)


def test_the_mirror_order_puts_the_peers_this_host_asked_least_first():
    fake = FakePeers()
    for name in ("gpu1", "gpu2", "gpu3"):
        fake.status(name, "done", held={"f%02d" % n: 10 for n in range(3)})
    source, peers = _source(fake, 3)
    source.book.new_look()
    found = source.book.holders([_Item("f%02d" % n) for n in range(3)])
    origins = [source._to_peers(_Item(path), found[path]).origin for path in sorted(found)]  # pylint: disable=protected-access
    assert sorted(origins) == ["peer:gpu1", "peer:gpu2", "peer:gpu3"]  # three files, three first peers


def test_polls_back_off_while_nothing_changes_and_start_over_when_something_does():
    fake = FakePeers()
    fake.status("gpu1", "fetching", held={})
    waits = []
    source, peers = _source(fake, 1, waits=waits)
    peers[0].share, peers[0].hub = frozenset(["f00"]), True  # its owner, still fetching it: waited for
    item = _Item("f00")
    for dummy in range(6):
        [(dummy_item, res)] = source.resolve([item])
        assert res.wait
        source.pause()
    # the first look saw its state: POLL_PAUSE; then doubling, capped at POLL_PAUSE_MAX (1, 2, 4, 4, 4, 4)
    assert waits == [min(_peers.POLL_PAUSE_MAX, _peers.POLL_PAUSE * 2 ** n) for n in range(6)]
    assert waits[-1] == _peers.POLL_PAUSE_MAX > waits[1] > waits[0]
    fake.status("gpu1", "fetching", held={"f01": 10})  # it placed a file: something changed
    source.resolve([item])
    source.pause()
    assert waits[-1] == _peers.POLL_PAUSE
    assert fake.counts() == {"GET": 7}  # one status read per look, no HEAD


def test_a_hung_peer_is_dropped_at_its_first_timeout_and_asked_nothing_more():
    """It accepts the connection and never answers: one request, no retry of it, no wait, and no HEAD
    nor status read in later looks (with 80 files that was 80 HEADs x 4 tries, minutes per hung peer)."""
    fake = FakePeers()
    fake.hung("gpu2")
    fake.status("gpu1", "fetching", held={"f00": 10})
    waits, log = [], []
    source, peers = _source(fake, 2, waits=waits, log=log)
    items = [_Item("f%02d" % i) for i in range(80)]
    for dummy in range(3):
        source.book.new_look()
        source.book.holders(items)
    assert fake.read_by_peer() == {"gpu1": 3, "gpu2": 1} and waits == []
    [reason] = [d["reason"] for d in source.dropped() if d["name"] == "gpu2"]
    assert "timed out" in reason and "its other requests are not sent" in reason


def test_a_peer_whose_heads_time_out_gets_no_more_of_its_queued_heads(monkeypatch):
    """A peer with no list (asked by HEAD): the first HEAD that times out drops it, and the HEADs still
    queued for it are not sent."""
    monkeypatch.setattr(_peerbook, "HEAD_THREADS", 1)  # one at a time: which HEADs were queued is certain
    fake = FakePeers()
    fake.no_status("gpu1")
    fake.hung("gpu1", methods=("HEAD",))
    source, peers = _source(fake, 1)
    source.book.new_look()
    assert source.book.holders([_Item("f%02d" % i) for i in range(80)]) == {"f%02d" % i: [] for i in range(80)}
    assert fake.counts() == {"GET": 1, "HEAD": 1}
    assert [d["name"] for d in source.dropped()] == ["gpu1"]


def test_a_claimed_peer_lists_nothing_yet_and_is_not_asked_by_head():
    fake = FakePeers()
    fake.raw_status("gpu1", json.dumps({"state": "started", "failed": [], "run": "r1"}).encode())
    source, peers = _source(fake, 1)
    peers[0].run = "r1"
    source.book.new_look()
    assert source.book.holders([_Item("f00")]) == {"f00": []}
    assert fake.counts() == {"GET": 1} and peers[0].held == {} and source.dropped() == []


def test_status_document_lists_what_is_held():
    doc = _peers.status_document("fetching", run="r1", held={"b": 2, "a": 1})
    assert doc == {"state": "fetching", "failed": [], "run": "r1", "held": {"a": 1, "b": 2}}
    assert list(doc["held"]) == ["a", "b"]
