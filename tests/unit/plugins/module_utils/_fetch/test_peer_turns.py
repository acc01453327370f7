# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 23: Hub turns. Every host's Hub share in one fleet-wide order; a host starts a large file of its own
share once fewer than HUB_TURNS of the files before it are still to come (published by no peer, their owner
still fetching), and a look that starts one holds the host's other files back, so the Hub sends a few files at a time at full speed and the first
copies are out for the peers to spread while it sends the rest. No network: the peers are fixtures/fake_peers.py,
driven by the calls, never by wall-clock time; the simulation (test_fleet_sim.py) runs it at fleet scale."""
from __future__ import annotations

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peerbook as _peerbook
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peers as _peers
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import rounds as _rounds
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.fake_peers import FakePeers
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils._fetch.test_peer_waves import _Hub
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils._fetch.test_peer_waves import _Item as _WaveItem

TOKEN = "t" * 48
BIG = _rounds.SMALL_FILE + 1
TURNS = _peers.HUB_TURNS
PATHS = ["s%02d.safetensors" % i for i in range(60)]
# the fleet's order: a hash of each path alone, so every host computes the same
ORDER = sorted(PATHS, key=lambda p: (_peerbook.heir_rank(p, "hub-turn"), p))
# gpu0 (this host) owns the places TURNS .. 2 x TURNS - 1, gpu1 the others: the file TURNS places before
# each of gpu0's is gpu1's
MINE = [p for n, p in enumerate(ORDER) if (n // TURNS) % 2 == 1]
THEIRS = [p for p in ORDER if p not in MINE]


def _item(path, size=BIG):
    """The waves' test item, large by default here."""
    return _WaveItem(path, size)


def _source(fake, *, seed="gpu0", clock=lambda: 0.0):
    peers = [_peers.Peer(name="gpu1", url="http://10.0.0.1:8370/m/c/", hub=True, share=frozenset(THEIRS))]
    hub = _Hub()
    source = _peers.PeerSource(peers, token=TOKEN, hub=hub, hub_share=set(MINE), wait_timeout=100, timeout=60,
                               opener=fake, log=lambda msg: None, sleep=lambda s: None, seed=seed, clock=clock)
    return source, hub


def test_the_order_is_the_fleets_and_a_turn_comes_once_fewer_than_turns_files_before_it_are_to_come():
    mine, ahead = ORDER[TURNS], ORDER[0]
    assert mine in MINE and ahead in THEIRS
    fake = FakePeers()
    fake.status("gpu1", "fetching", held={})
    source, hub = _source(fake)
    assert source._turn_order() == ORDER  # from the shares alone: the same on every host
    # not due: its own file waits, and a file of another's share goes on as usual (here: its owner has not
    # published it either, so it waits too); nothing asked of the Hub
    answers = dict((item.key, res) for item, res in source.resolve([_item(mine), _item(THEIRS[-1])]))
    assert answers[mine].wait and answers[THEIRS[-1]].wait and hub.asked == []
    # gpu1 publishes one of the TURNS files before it (TURNS - 1 to come): due now, from the Hub, and the look
    # holds back the files not of its share (here the one gpu1 just published), so the Hub file has the downlink
    fake.status("gpu1", "fetching", held={ahead: BIG})
    answers = dict((item.key, res) for item, res in source.resolve([_item(mine), _item(ahead)]))
    assert answers[mine].url == "https://hub/" + mine and hub.asked == [mine]
    assert answers[ahead].wait and answers[ahead].url is None
    # the next look without an own file due takes it from gpu1
    [(dummy, res)] = source.resolve([_item(ahead)])
    assert res.url.startswith("http://10.0.0.1:8370/m/c/") and hub.asked == [mine]


def test_the_first_turns_and_small_files_are_due_at_once():
    fake = FakePeers()
    fake.status("gpu1", "fetching", held={})
    source, hub = _source(fake)
    small = MINE[0]
    answers = dict((item.key, res) for item, res in source.resolve([_item(small, size=100)]))
    assert answers[small].url == "https://hub/" + small  # a small file of its share takes no turn
    first = ORDER[:TURNS]
    assert all(source._turn_due(p) for p in first)


@pytest.mark.parametrize("ahead_owner", ["hung", "done", "failed", "failed file", "no list"])
def test_a_turn_is_due_when_the_file_before_it_will_not_be_published(ahead_owner):
    mine, ahead = ORDER[TURNS], ORDER[0]
    fake = FakePeers()
    if ahead_owner == "hung":
        fake.hung("gpu1")
    elif ahead_owner == "done":
        fake.status("gpu1", "done", held={})
    elif ahead_owner == "failed":
        fake.status("gpu1", "failed", held={})
    elif ahead_owner == "failed file":
        fake.status("gpu1", "fetching", held={}, failed=[ahead])
    else:
        fake.status("gpu1", "fetching")  # an older host: its status lists nothing to wait on
    source, hub = _source(fake)
    [(dummy, res)] = source.resolve([_item(mine)])
    assert res.url == "https://hub/" + mine and hub.asked == [mine]


def test_without_a_name_or_past_peer_wait_timeout_every_turn_is_due():
    mine = ORDER[TURNS]
    fake = FakePeers()
    fake.status("gpu1", "fetching", held={})
    now = [0.0]
    source, hub = _source(fake, clock=lambda: now[0])
    assert not source._turn_due(mine)
    now[0] = 100.0  # wait_timeout
    assert source._turn_due(mine)
    nameless, dummy = _source(fake, seed=None)
    assert nameless.name is None and nameless._turn_due(mine) and nameless._held_back([_item(mine)]) == {}


def test_one_owner_slow_to_publish_holds_no_turn_back():
    """A turn is due once fewer than HUB_TURNS files before it are still to come, not once one given file came:
    gpu1 lists every file before this host's but the first (its Hub route fails and retries, say), and the turn
    is due all the same; with two of them missing it is not, at a window of TURNS - 1."""
    mine = ORDER[TURNS]
    fake = FakePeers()
    fake.status("gpu1", "fetching", held={p: BIG for p in ORDER[1:TURNS]})
    source, hub = _source(fake)
    [(dummy, res)] = source.resolve([_item(mine)])
    assert res.url == "https://hub/" + mine and hub.asked == [mine]
    fake = FakePeers()
    fake.status("gpu1", "fetching", held={p: BIG for p in ORDER[2:TURNS]})
    source, hub = _source(fake)
    assert source._turn_due(mine)  # 2 to come, fewer than TURNS
    mine_later = next(p for p in MINE if source.turn_of[p] == 2 * TURNS - 1)
    # before it: gpu1's 24 (22 listed) and 23 of its own share, not placed yet: 25 to come
    assert not source._turn_due(mine_later)


def test_an_owner_not_read_yet_counts_as_still_to_come():
    """What a peer holds is unknown until its status is read: its files count as still to come (a turn never
    goes early on what the book has not seen); read, an owner that publishes no list holds nothing back."""
    mine = ORDER[TURNS]
    fake = FakePeers()
    fake.status("gpu1", "fetching", held={})
    source, dummy = _source(fake)
    owner = source.book.owner(ORDER[0])
    assert not owner.read and not source._turn_due(mine) and owner.read  # read in this decision: nothing held
    fake = FakePeers()
    fake.status("gpu1", "fetching")  # read: it lists nothing
    source, dummy = _source(fake)
    assert source._turn_due(mine)
