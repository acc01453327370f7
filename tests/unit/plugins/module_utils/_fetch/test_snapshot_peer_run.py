# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The run's "started" claim (issue 21 item 5c): a host that fails before its fetch writes ``fetching``
is gone for its peers at once, not after ``peer_wait_timeout``.

Against the real lab Hub with real aria2c; peers are the loopback servers of peer_server.py. Every
wait timeout here is huge (10**6 s): a fetch that waited for the failed host would never return, so
each test first gives the waiting side an event that would end such a wait (the status or the file
appears right after the first look that misses it) and then asserts it was not needed.
"""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import claim as _claim
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peers as _peers
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils._fetch.test_snapshot_peers import (  # noqa: F401 pylint: disable=unused-import
    SHARDS, hub_files, peer_args, peers, run, seed, status_of)

RUN = "k3v9x0qa"
HUGE = 10 ** 6
STATUS = ".gpufleet/peer-status.json"


def _status_file(tmp_path, name, status):
    path = tmp_path / ("status-" + name)
    path.write_text(json.dumps(status))
    return str(path)


def _status_reads(server):
    return [e for e in server.log if e["path"].endswith("/" + STATUS) or e["path"] == "/" + STATUS]


def test_a_peer_whose_stage_never_started_is_gone_at_once(lab_hub, seed, peers, tmp_path):
    """No status of this run from a live server: the host failed before its claim (unreachable, its module
    could not start). Its share comes from the Hub at once: one status read, no wait."""
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[0]]
    # were the module to wait, the owner's status would say "failed" right after the first read missed it
    owner = peers("gpu2", [], seed_dir, "127.0.0.3",
                  publish_on_miss={STATUS: _status_file(tmp_path, "gpu2", {"state": "failed", "failed": [], "run": RUN})})
    dest = tmp_path / "d"
    res = run(lab_hub, dest, **peer_args(commit, shard, ("gpu2", owner), shares={"gpu2": [SHARDS[0]]}, hub_share=[],
                                         peer_wait_timeout=HUGE, peer_run=RUN))
    assert [r["source"] for r in res["files"]] == ["hub"] and hub_files(lab_hub, listing) == {SHARDS[0]}
    assert [d["name"] for d in res["peers_dropped"]] == ["gpu2"]
    assert "never started" in res["peers_dropped"][0]["reason"] and RUN in res["peers_dropped"][0]["reason"]
    assert [e["status"] for e in _status_reads(owner)] == [404]  # gone at the first read, not waited for
    assert status_of(dest) == {"state": "done", "failed": [], "run": RUN, "held": {SHARDS[0]: shard[0]["size"]}}


def test_a_peer_holding_another_runs_status_is_gone_at_once(lab_hub, seed, peers, tmp_path):
    """Another run holds that host's lock (or its status is older than this run): its status is not this
    run's. Were it waited for, the file would appear after the first miss and come from that peer."""
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[0]]
    hold = tmp_path / "unpublished"
    hold.mkdir()
    os.link(seed_dir / SHARDS[0], hold / SHARDS[0])
    owner = peers("gpu2", [], seed_dir, "127.0.0.3", publish_on_miss={SHARDS[0]: str(hold / SHARDS[0])})
    owner.status("fetching")
    status = status_of(owner.root)
    status["run"] = "otherrun"
    (tmp_path / "peer-gpu2" / ".gpufleet" / "peer-status.json").write_text(json.dumps(status))
    res = run(lab_hub, tmp_path / "d", **peer_args(commit, shard, ("gpu2", owner), shares={"gpu2": [SHARDS[0]]},
                                                   hub_share=[], peer_wait_timeout=HUGE, peer_run=RUN))
    assert [r["source"] for r in res["files"]] == ["hub"]
    assert [d["name"] for d in res["peers_dropped"]] == ["gpu2"] and "otherrun" in res["peers_dropped"][0]["reason"]


def test_a_peer_that_claimed_this_run_is_waited_for(lab_hub, seed, peers, tmp_path):
    """"started" of this run: its fetch is about to write "fetching"; its share is waited for, not taken
    from the Hub (the owner places the file and lists it in its status right after the first read)."""
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[0]]
    owner = peers("gpu2", [], seed_dir, "127.0.0.3")
    _claim.claim_status(owner.root, RUN)
    assert status_of(owner.root) == {"state": "started", "failed": [], "run": RUN}

    def place():
        os.link(seed_dir / SHARDS[0], os.path.join(owner.root, SHARDS[0]))
        _peers.write_status(owner.root, "fetching", run=RUN, held={SHARDS[0]: shard[0]["size"]})
    owner.on_status_read = place
    res = run(lab_hub, tmp_path / "d", **peer_args(commit, shard, ("gpu2", owner), shares={"gpu2": [SHARDS[0]]},
                                                   hub_share=[], peer_wait_timeout=HUGE, peer_run=RUN))
    assert [r["source"] for r in res["files"]] == ["peer:gpu2"] and res["peers_dropped"] == []
    assert hub_files(lab_hub, listing) == set()


def test_a_host_that_fails_before_fetching_turns_its_claim_into_failed_and_its_peers_go_to_the_hub(
        lab_hub, seed, peers, tmp_path):
    """gpu2 claims, then its fetch fails before it holds the lock (a listing its own Hub listing refutes).
    Its status becomes "failed" of this run, and gpu1, waiting for gpu2's share with a huge wait timeout,
    takes it from the Hub at once. gpu2's peer server serves gpu2's real dest."""
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[0]]
    gpu2_dest = tmp_path / "peer-gpu2"
    gpu2 = peers("gpu2", [], seed_dir, "127.0.0.3")
    claimed = run(lab_hub, gpu2_dest, **peer_args(commit, shard, shares={"gpu2": [SHARDS[0]]}, hub_share=[SHARDS[0]],
                                                  peer_run=RUN, peer_claim=True))
    assert claimed == {"changed": False, "claimed": RUN, "dest": str(gpu2_dest), "msg": claimed["msg"]}
    assert status_of(gpu2_dest) == {"state": "started", "failed": [], "run": RUN}
    forged = [dict(e, size=e["size"] + 1) for e in shard]
    with pytest.raises(_snapshot.SnapshotError):
        run(lab_hub, gpu2_dest, **peer_args(commit, forged, shares={"gpu2": [SHARDS[0]]}, hub_share=[SHARDS[0]], peer_run=RUN))
    assert status_of(gpu2_dest) == {"state": "failed", "failed": [], "run": RUN}
    lab_hub.reset()
    res = run(lab_hub, tmp_path / "gpu1", **peer_args(commit, shard, ("gpu2", gpu2), shares={"gpu2": [SHARDS[0]]},
                                                      hub_share=[], peer_wait_timeout=HUGE, peer_run=RUN))
    assert [r["source"] for r in res["files"]] == ["hub"] and res["peers_dropped"] == []
    assert [e["status"] for e in _status_reads(gpu2)] == [200]


def test_the_claim_never_replaces_a_live_runs_status(lab_hub, tmp_path):
    """Another run holds the lock (it writes its status under it): the claim fails naming the lock and the
    status stays that run's; so does the failed fetch's compare-and-swap."""
    dest = tmp_path / "d"
    _peers.write_status(str(dest), "fetching", run="otherrun")
    params = dict(revision="0" * 40, listing=[], peers=[], peer_token="x" * 32, peer_run=RUN)
    with _manifest.DirLock(str(dest)):
        with pytest.raises(_snapshot.SnapshotError) as err:
            run(lab_hub, dest, peer_claim=True, **params)
        assert "locked by another run" in err.value.msg and "status stays" in err.value.msg
        assert status_of(dest) == {"state": "fetching", "failed": [], "run": "otherrun"}
    # no lock held now, but the status is another run's: a failure of this run leaves it alone
    assert not _claim.claim_status(str(dest), RUN, state="failed", only_over="started")
    assert status_of(dest) == {"state": "fetching", "failed": [], "run": "otherrun"}
    # the claim (no live run) replaces a status a dead run left
    run(lab_hub, dest, peer_claim=True, **params)
    assert status_of(dest) == {"state": "started", "failed": [], "run": RUN}


def test_the_claim_never_writes_through_a_symlinked_meta_dir(lab_hub, tmp_path):
    dest = tmp_path / "d"
    dest.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(str(elsewhere), str(dest / ".gpufleet"))
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest, peer_claim=True, revision="0" * 40, listing=[], peers=[], peer_token="x" * 32, peer_run=RUN)
    assert "symlink" in err.value.msg and os.listdir(str(elsewhere)) == []


def test_peer_claim_needs_a_well_formed_peer_run(lab_hub, tmp_path):
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, tmp_path / "d", peer_claim=True)
    assert "peer_claim needs peer_run" in err.value.msg
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, tmp_path / "d", peer_claim=True, peer_run="a/b")
    assert "peer_run must be" in err.value.msg and not (tmp_path / "d").exists()
