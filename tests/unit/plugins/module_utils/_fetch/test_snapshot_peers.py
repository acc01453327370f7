# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hf_snapshot's listing hand-over and peer fetching (issue 12 item 2), against the real lab Hub with
real aria2c; peers are small Range-capable servers on loopback (peer_server.py; the fleet
integration target tests the real nginx of peer_serve). Faults are driven by bytes and events."""
from __future__ import annotations

import hashlib
import json
import os
import threading

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import aria2 as _aria2
from ansible_collections.gpufleet.llm.plugins.module_utils._common import hashing as _hashing
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peers as _peers
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import peerbook as _peerbook
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import rounds as _rounds
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import run_result as _run_result
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _snapshot_staging
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import transfer as _transfer
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import peer_server
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import snapshot_files as sf

TARGET = "gpufleet-lab/Kimi-K2.6-mini"


def run(lab, dest, **params):
    # peer_name: this host's order of the peers is the same on every machine (default: its host name)
    base = dict(repo_id=TARGET, revision="main", dest=str(dest), endpoint=lab.api, min_free_bytes=0,
                retry_wait=0, connections=4, splits=4, min_split_size="1M", peer_name="gpu1")
    base.update(params)
    return _snapshot.snapshot(base)


def listed(hub, tmp_path, **params):
    return run(hub, tmp_path / "unused", resolve_only=True, **params)


def test_resolve_only_rows_carry_what_a_listing_needs(lab_hub, tmp_path):
    res = listed(lab_hub, tmp_path)
    commit, files = lab_hub.files_at(TARGET, "main")
    for row in res["files"]:
        entry = files[row["path"]]
        assert row["blob_id"] == entry["blob_id"] and row["size"] == entry["size"]
        assert row["sha256"] == (entry["lfs"]["sha256"] if entry.get("lfs") else None)


def test_listing_is_held_against_the_hosts_own_listing(lab_hub, aria2c, tmp_path):
    """hub=true: the listing handed over is not trusted; this host lists the commit itself and, when the
    two agree, fetches by its own list."""
    res = listed(lab_hub, tmp_path, allow_patterns=["*.json"])
    listing = [{k: row[k] for k in ("path", "size", "sha256", "blob_id")} for row in res["files"]]
    lab_hub.reset()
    dest = tmp_path / "d"
    got = run(lab_hub, dest, revision=res["commit"], listing=listing, listing_from="gpu1", allow_patterns=["*.json"])
    assert got["changed"] and sorted(r["path"] for r in got["files"]) == sorted(r["path"] for r in listing)
    # this host's own listing of the commit: over its own connection, before any file
    assert [e for e in lab_hub.log(server="api") if e["path"].startswith("/api/models/%s/tree/" % TARGET)]
    assert all(os.path.isfile(dest / r["path"]) for r in listing)


def _blob_id(data):
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()  # nosec B324 - git's object id


def _forged(listing, path, **fields):
    out = [dict(entry) for entry in listing]
    for entry in out:
        if entry["path"] == path:
            entry.update(fields)
    return out


@pytest.mark.parametrize("resolve_only", [False, True], ids=["fetch", "resolve_only"])
def test_a_forged_listing_is_refused_naming_its_source_and_the_file(lab_hub, aria2c, tmp_path, resolve_only):
    """Issue 20 item 1: the host that resolved hands out a listing whose modeling_*.py entry names other
    bytes (and adds a file). A host with Hub access refuses it before anything is fetched or written."""
    res = listed(lab_hub, tmp_path)
    listing = [{k: row[k] for k in ("path", "size", "sha256", "blob_id")} for row in res["files"]]
    assert any(e["path"] == "modeling_kimi_k25.py" for e in listing)
    evil = b"import os\nos.system('id > /tmp/pwned')\n"
    forged = _forged(listing, "modeling_kimi_k25.py", size=len(evil), blob_id=_blob_id(evil))
    forged.append({"path": "extra_hook.py", "size": len(evil), "sha256": None, "blob_id": _blob_id(evil)})
    lab_hub.reset()
    dest = tmp_path / "d"
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest, revision=res["commit"], listing=forged, listing_from="gpu1", resolve_only=resolve_only)
    msg = err.value.msg
    assert "handed over from gpu1" in msg and "modeling_kimi_k25.py: blob_id" in msg and "modeling_kimi_k25.py: size" in msg
    assert "extra_hook.py: not on the Hub" in msg
    fields = {(d["path"], d["field"]) for d in err.value.fail_kwargs()["listing_differences"]}
    assert fields == {("modeling_kimi_k25.py", "size"), ("modeling_kimi_k25.py", "blob_id"), ("extra_hook.py", "presence")}
    # refused before anything was written (the Hub's log is shared with whatever an earlier test left in
    # flight, so what was not fetched is read from dest, which this run alone writes)
    assert not dest.exists()


def test_a_listing_that_leaves_a_file_out_is_refused(lab_hub, tmp_path):
    res = listed(lab_hub, tmp_path)
    listing = [{k: row[k] for k in ("path", "size", "sha256", "blob_id")} for row in res["files"]]
    short = [e for e in listing if e["path"] != "config.json"]
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, tmp_path / "d", revision=res["commit"], listing=short, resolve_only=True)
    assert "handed over from the listing option" in err.value.msg and "config.json: left out of the listing" in err.value.msg


def test_hub_false_takes_the_listing_as_given(lab_hub, tmp_path):
    """A host without Hub access cannot check: it uses the listing as given (docs/fleet.md says which
    list the model role gives such a host) and never asks the Hub."""
    res = listed(lab_hub, tmp_path, allow_patterns=["*.json"])
    listing = [{k: row[k] for k in ("path", "size", "sha256", "blob_id")} for row in res["files"]]
    lab_hub.reset()
    got = run(lab_hub, tmp_path / "d", revision=res["commit"], listing=listing, hub=False, resolve_only=True,
              allow_patterns=["*.json"])
    assert sorted(r["path"] for r in got["files"]) == sorted(e["path"] for e in listing)
    assert not lab_hub.log(server="api")


def test_listing_is_checked_like_the_hubs_answer(lab_hub, tmp_path):
    commit = lab_hub.files_at(TARGET, "main")[0]
    bad = [{"path": "../escape.json", "size": 3, "sha256": None, "blob_id": "a" * 40}]
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, tmp_path / "d", revision=commit, listing=bad)
    assert "listing entry 0" in err.value.msg and not (tmp_path / "d").exists()
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, tmp_path / "d", revision="main", listing=bad)
    assert "40-hex commit" in err.value.msg
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, tmp_path / "d", revision=commit, hub=False)
    assert "hub=false needs listing" in err.value.msg


# ----------------------------------------------------------------------------- peers
PEER_TOKEN = "peerTOKENfakeNOTaSECRET0000000001"
SELECTION = ["*.safetensors", "config.json"]
SHARDS = ["model-0000%d-of-000004.safetensors" % n for n in (1, 2, 3, 4)]


@pytest.fixture
def seed(lab_hub, aria2c, tmp_path):
    """(commit, listing, seed dir): the selection fetched once from the Hub, then the Hub's log cleared."""
    res = listed(lab_hub, tmp_path, allow_patterns=SELECTION)
    listing = [{k: row[k] for k in ("path", "size", "sha256", "blob_id")} for row in res["files"]]
    seed_dir = tmp_path / "seed"
    run(lab_hub, seed_dir, revision=res["commit"], listing=listing, allow_patterns=SELECTION)
    lab_hub.reset()
    return res["commit"], listing, seed_dir


@pytest.fixture
def peers(tmp_path):
    started = []

    def make(name, paths, seed_dir, host, **faults):
        root = tmp_path / ("peer-" + name)
        root.mkdir()
        for path in paths:
            os.link(seed_dir / path, root / path)
        server = peer_server.PeerServer(root, PEER_TOKEN, host=host, **faults)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


def peer_args(commit, listing, *servers, shares=None, **params):
    shares = shares or {}
    # the listing's selection: a host with Hub access holds the listing against its own, selected alike
    args = dict(revision=commit, listing=listing, peer_token=PEER_TOKEN, allow_patterns=SELECTION,
                peers=[{"name": name, "url": server.url, "share": shares.get(name, [])} for name, server in servers])
    args.update(params)
    return args


def hub_files(hub, listing):
    """Paths of the files whose bodies the lab Hub served (its API for small files, its CDN by sha256); not the
    listing a host with Hub access makes to check the listing it was given."""
    by_name = {e["sha256"]: e["path"] for e in listing if e["sha256"]}
    by_name.update({e["path"].rsplit("/", 1)[-1]: e["path"] for e in listing})
    return {by_name.get(e["path"].rsplit("/", 1)[-1], e["path"]) for e in hub.log() + hub.log(server="cdn")
            if e["method"] == "GET" and e["bytes_sent"] and not e["path"].startswith("/api/")}


def scan_for(root, secret):
    hits = []
    for folder, dummy, names in os.walk(root):
        for name in names:
            with open(os.path.join(folder, name), "rb") as handle:
                if secret.encode() in handle.read():
                    hits.append(os.path.join(folder, name))
    return hits


def assert_tree_verified(dest, listing):
    for entry in listing:
        path = os.path.join(str(dest), entry["path"])
        assert os.path.getsize(path) == entry["size"]
        if entry["sha256"]:
            assert _hashing.sha256_file(path) == entry["sha256"]
        else:
            assert _hashing.git_blob_sha1(path) == entry["blob_id"]


def status_of(dest):
    with open(os.path.join(str(dest), ".gpufleet", "peer-status.json")) as handle:
        return json.load(handle)


def test_all_files_from_peers_no_hub_byte_token_never_on_argv(lab_hub, seed, peers, tmp_path, monkeypatch):
    commit, listing, seed_dir = seed
    paths = [e["path"] for e in listing]
    one = peers("gpu2", paths, seed_dir, "127.0.0.3")
    two = peers("gpu3", paths, seed_dir, "127.0.0.4")
    one.status("done")
    two.status("done")
    argvs = []
    real_start = _aria2._start

    def spy(argv, out_file):
        argvs.append(list(argv))
        return real_start(argv, out_file)

    monkeypatch.setattr(_aria2, "_start", spy)
    dest = tmp_path / "d"
    res = run(lab_hub, dest, **peer_args(commit, listing, ("gpu2", one), ("gpu3", two), hub_share=[]))
    total = sum(e["size"] for e in listing)
    assert res["changed"] and res["bytes_from_hub"] == 0 and res["bytes_from_peers"] == total
    assert sum(res["from_peers"].values()) == total and res["peers_dropped"] == []
    assert {r["source"] for r in res["files"]} <= {"peer:gpu2", "peer:gpu3"}
    assert hub_files(lab_hub, listing) == set()  # the Hub's own log: not one body
    assert_tree_verified(dest, listing)
    # done, listing every file it holds (its peer server serves them)
    assert status_of(dest) == {"state": "done", "failed": [], "held": {e["path"]: e["size"] for e in listing}}
    # the token went to the peers (every request carried it) and nowhere else
    assert all(e["auth_ok"] for e in one.log + two.log)
    assert argvs and not any(PEER_TOKEN in arg for argv in argvs for arg in argv)
    assert PEER_TOKEN not in json.dumps(res) and not scan_for(dest, PEER_TOKEN)
    # a re-run moves nothing
    sent = one.bytes_sent() + two.bytes_sent()
    again = run(lab_hub, dest, **peer_args(commit, listing, ("gpu2", one), ("gpu3", two), hub_share=[]))
    assert not again["changed"] and again["bytes_fetched"] == 0 and again["bytes_from_peers"] == 0
    assert one.bytes_sent() + two.bytes_sent() == sent and hub_files(lab_hub, listing) == set()
    assert status_of(dest)["state"] == "done"


def test_own_share_from_the_hub_the_rest_once_its_owner_publishes(lab_hub, seed, peers, tmp_path):
    commit, listing, seed_dir = seed
    mine = ["config.json", SHARDS[0], SHARDS[3]]
    theirs = [SHARDS[1], SHARDS[2]]
    hold = tmp_path / "unpublished"
    hold.mkdir()
    for path in theirs:
        os.link(seed_dir / path, hold / path)
    # the owner holds nothing yet; each of its files appears (renamed into its tree) right after
    # the first request that misses it: the module must wait for that, not fetch it from the Hub
    owner = peers("gpu2", [], seed_dir, "127.0.0.3", publish_on_miss={p: str(hold / p) for p in theirs})
    owner.status("fetching")
    dest = tmp_path / "d"
    res = run(lab_hub, dest, **peer_args(commit, listing, ("gpu2", owner), shares={"gpu2": theirs}, hub_share=mine))
    sources = {r["path"]: r["source"] for r in res["files"]}
    assert sources == dict({p: "hub" for p in mine}, **{p: "peer:gpu2" for p in theirs})
    assert hub_files(lab_hub, listing) == set(mine)
    assert res["bytes_from_peers"] == sum(e["size"] for e in listing if e["path"] in theirs)
    assert_tree_verified(dest, listing)


def test_a_file_is_published_as_soon_as_it_is_verified_while_its_batch_still_downloads(
        lab_hub, seed, peers, tmp_path, monkeypatch):
    """Issue 23: config.json and a shard in one batch (one aria2c); the peer stops the shard halfway until
    this host's peer-status lists config.json (an event, not a timer): the small file is placed and
    published while the shard still downloads, not once the batch's aria2c has ended."""
    commit, listing, seed_dir = seed
    chosen = [e for e in listing if e["path"] in ("config.json", SHARDS[0])]
    size = {e["path"]: e["size"] for e in chosen}
    listed_config = threading.Event()
    peer = peers("gpu2", list(size), seed_dir, "127.0.0.3",
                 gate={"path": SHARDS[0], "after": size[SHARDS[0]] // 2, "event": listed_config})
    peer.status("done")
    dest = tmp_path / "d"
    seen = []
    real_write = _peers.write_status

    def write_status(where, state, failed=(), run=None, held=None):
        real_write(where, state, failed, run=run, held=held)
        if "config.json" in (held or {}) and not listed_config.is_set():
            # what a peer reading this host's status now finds: config.json listed and in place, the shard not yet
            seen.append((status_of(dest), peer.gate_done.is_set(), os.path.isfile(dest / "config.json"),
                         os.path.exists(dest / SHARDS[0])))
            listed_config.set()

    monkeypatch.setattr(_peers, "write_status", write_status)
    res = run(lab_hub, dest, connections=1, splits=1, timeout=120,
              **peer_args(commit, chosen, ("gpu2", peer), hub_share=[]))
    assert seen == [({"state": "fetching", "failed": [], "held": {"config.json": size["config.json"]}}, False, True, False)]
    assert peer.gate_opened and peer.gate_done.is_set()
    assert sorted(r["source"] for r in res["files"]) == ["peer:gpu2", "peer:gpu2"]
    assert res["from_peers"] == {"gpu2": sum(size.values())} and hub_files(lab_hub, listing) == set()
    assert status_of(dest) == {"state": "done", "failed": [], "held": size}
    assert_tree_verified(dest, chosen)


def test_a_freed_slot_takes_the_next_file_while_another_lane_still_downloads(lab_hub, seed, peers, tmp_path, monkeypatch):
    """Issue 23: a peer source's round runs in lanes. Four shards, two slots (parallel_files 2, every file
    counted large here); the peer stops the shard this host takes first halfway, until this host's
    peer-status lists the three others (an event, not a timer). Those three pass through the other slot one
    after another, each in its own aria2c started as a slot freed, while the first still downloads; a batch
    of two would have waited for its stopped shard, and the event would never have come."""
    commit, listing, seed_dir = seed
    chosen = [e for e in listing if e["path"] in SHARDS]
    size = {e["path"]: e["size"] for e in chosen}
    first = _peerbook.shuffled(SHARDS, "gpu1")[0]  # this host's order at its first look (peer_name gpu1)
    others = set(SHARDS) - {first}
    monkeypatch.setattr(_rounds, "SMALL_FILE", 0)  # the lab's shards are small: each takes a slot here
    listed_others = threading.Event()
    peer = peers("gpu2", SHARDS, seed_dir, "127.0.0.3", gate={"path": first, "after": size[first] // 2, "event": listed_others})
    peer.status("done", held=size)
    dest = tmp_path / "d"
    seen = []
    argvs = []
    real_write, real_start = _peers.write_status, _aria2._start

    def write_status(where, state, failed=(), run=None, held=None):
        real_write(where, state, failed, run=run, held=held)
        if others <= set(held or {}) and not listed_others.is_set():
            seen.append((sorted(held), peer.gate_done.is_set(), os.path.exists(dest / first)))
            listed_others.set()

    def start(argv, out_file):
        argvs.append(argv)
        return real_start(argv, out_file)

    monkeypatch.setattr(_peers, "write_status", write_status)
    monkeypatch.setattr(_aria2, "_start", start)
    res = run(lab_hub, dest, connections=1, splits=1, parallel_files=2, timeout=120,
              **peer_args(commit, chosen, ("gpu2", peer), hub_share=[]))
    assert seen == [(sorted(others), False, False)]
    assert peer.gate_opened and peer.gate_done.is_set()
    gets = [e["path"].lstrip("/") for e in peer.log if e["method"] == "GET" and e["path"].lstrip("/") in size]
    assert gets[-1] == first  # its body, stopped halfway, was the last to end
    # an aria2c per look that started files: the first look's two in one, then one per freed slot
    assert len(argvs) == 3 and len({a for argv in argvs for a in argv if a.startswith("--input-file=")}) == 3
    assert res["from_peers"] == {"gpu2": sum(size.values())} and hub_files(lab_hub, listing) == set()
    assert status_of(dest) == {"state": "done", "failed": [], "held": size}
    assert_tree_verified(dest, chosen)


def test_a_lane_s_hash_holds_no_other_lane_back(lab_hub, seed, peers, tmp_path, monkeypatch):
    """Issue 23: a shard's hash takes seconds; the lanes round does not wait for it. One slot (parallel_files 1,
    every file counted large here), two shards: the first one's hash is held until a second aria2c has started
    (an event, not a timer), so the next file must start while the first is still being hashed, and both are
    placed in the end. A round that settled a lane by waiting for its hashes would never start the second."""
    commit, listing, seed_dir = seed
    chosen = [e for e in listing if e["path"] in SHARDS[:2]]
    size = {e["path"]: e["size"] for e in chosen}
    first = _peerbook.shuffled(list(size), "gpu1")[0]
    monkeypatch.setattr(_rounds, "SMALL_FILE", 0)
    second_started = threading.Event()
    released = []
    real_hash, real_start = _snapshot_staging.hash_staged, _aria2._start

    def hash_staged(path, remote):
        if remote.path == first and not released:
            released.append(second_started.wait(60))
        return real_hash(path, remote)

    def start(argv, out_file):
        proc = real_start(argv, out_file)
        starts.append(argv)
        if len(starts) == 2:
            second_started.set()
        return proc

    starts = []
    monkeypatch.setattr(_snapshot_staging, "hash_staged", hash_staged)
    monkeypatch.setattr(_aria2, "_start", start)
    peer = peers("gpu2", list(size), seed_dir, "127.0.0.3")
    peer.status("done", held=size)
    dest = tmp_path / "d"
    res = run(lab_hub, dest, connections=1, splits=1, parallel_files=1, timeout=120,
              **peer_args(commit, chosen, ("gpu2", peer), hub_share=[]))
    assert released == [True] and len(starts) == 2
    assert res["from_peers"] == {"gpu2": sum(size.values())} and hub_files(lab_hub, listing) == set()
    assert status_of(dest) == {"state": "done", "failed": [], "held": size}
    assert_tree_verified(dest, chosen)


# this host's name (peer_name) seeds its order of the peers: with BAD_FIRST the corrupt peer is the first
# mirror, as the scenarios below need (aria2 may take every byte from the first URI)
BAD_FIRST = "gpu1"


def test_corrupting_peer_is_dropped_and_nothing_bad_lands(lab_hub, seed, peers, tmp_path):
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[0]]
    bad = peers("bad", [SHARDS[0]], seed_dir, "127.0.0.3", corrupt=True)
    good = peers("good", [SHARDS[0]], seed_dir, "127.0.0.4")
    for server in (bad, good):
        server.status("done")
    dest = tmp_path / "d"
    assert _peerbook.shuffled(["bad", "good"], BAD_FIRST) == ["bad", "good"]
    res = run(lab_hub, dest, peer_name=BAD_FIRST, **peer_args(commit, shard, ("bad", bad), ("good", good), hub_share=[]))
    assert [r["source"] for r in res["files"]] == ["peer:good"]
    assert [d["name"] for d in res["peers_dropped"]] == ["bad"] and "hash" in res["peers_dropped"][0]["reason"]
    assert hub_files(lab_hub, listing) == set()
    assert_tree_verified(dest, shard)


def test_peer_dying_mid_file_then_the_hub(lab_hub, seed, peers, tmp_path):
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[1]]
    dying = peers("gpu2", [SHARDS[1]], seed_dir, "127.0.0.3", die_after=1 << 20)
    dying.status("fetching")
    dest = tmp_path / "d"
    res = run(lab_hub, dest, **peer_args(commit, shard, ("gpu2", dying), shares={"gpu2": [SHARDS[1]]}, hub_share=[]))
    assert [r["source"] for r in res["files"]] == ["hub"]
    assert [d["name"] for d in res["peers_dropped"]] == ["gpu2"]
    assert hub_files(lab_hub, listing) == {SHARDS[1]}
    assert_tree_verified(dest, shard)


def test_owner_gone_or_failed_means_the_hub(lab_hub, seed, peers, tmp_path):
    commit, listing, seed_dir = seed
    two = [e for e in listing if e["path"] in SHARDS[2:]]
    failed = peers("gpu2", [], seed_dir, "127.0.0.3")
    failed.status("failed", [SHARDS[2]])
    gone = peers("gpu3", [], seed_dir, "127.0.0.4")
    gone.stop()
    dest = tmp_path / "d"
    res = run(lab_hub, dest, **peer_args(commit, two, ("gpu2", failed), ("gpu3", gone),
                                         shares={"gpu2": [SHARDS[2]], "gpu3": [SHARDS[3]]}, hub_share=[]))
    assert {r["source"] for r in res["files"]} == {"hub"}
    assert [d["name"] for d in res["peers_dropped"]] == ["gpu3"]
    assert "unreachable" in res["peers_dropped"][0]["reason"]
    assert hub_files(lab_hub, listing) == set(SHARDS[2:])


def test_peer_wait_timeout_is_the_last_resort(lab_hub, seed, peers, tmp_path):
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[0]]
    owner = peers("gpu2", [], seed_dir, "127.0.0.3")
    owner.status("fetching")  # alive and fetching, but it never publishes the file
    res = run(lab_hub, tmp_path / "d", **peer_args(commit, shard, ("gpu2", owner), shares={"gpu2": [SHARDS[0]]},
                                                   hub_share=[], peer_wait_timeout=0))
    assert [r["source"] for r in res["files"]] == ["hub"] and res["peers_dropped"] == []


def test_no_hub_access_and_no_peer_fails_clearly(lab_hub, seed, peers, tmp_path):
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[0]]
    owner = peers("gpu2", [], seed_dir, "127.0.0.3")
    owner.status("done")
    dest = tmp_path / "d"
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest, **peer_args(commit, shard, ("gpu2", owner), shares={"gpu2": [SHARDS[0]]}, hub=False))
    assert "no Hub access" in err.value.msg and SHARDS[0] in err.value.msg
    assert PEER_TOKEN not in err.value.msg and not scan_for(dest, PEER_TOKEN)
    assert status_of(dest) == {"state": "failed", "failed": [SHARDS[0]], "held": {}}
    assert lab_hub.log() == [] and not os.path.exists(dest / SHARDS[0])


def test_check_mode_says_where_files_would_come_from(lab_hub, seed, peers, tmp_path):
    commit, listing, seed_dir = seed
    owner = peers("gpu2", [], seed_dir, "127.0.0.3")
    res = _snapshot.snapshot(dict(repo_id=TARGET, dest=str(tmp_path / "d"), endpoint=lab_hub.api, min_free_bytes=0,
                                  **peer_args(commit, listing, ("gpu2", owner), shares={"gpu2": SHARDS},
                                              hub_share=["config.json"])), check_mode=True)
    sources = {r["path"]: r["source"] for r in res["files"]}
    assert sources == dict({"config.json": "hub"}, **{p: "peer:gpu2" for p in SHARDS})
    assert owner.log == [] and not (tmp_path / "d").exists()


# ----------------------------------------------------------------------------- without a network
class _Item(object):
    def __init__(self, path, size=10):
        self.remote = _hub.RemoteFile(path=path, size=size, blob_id="b" * 40, sha256="c" * 64, lfs=True)
        self.key = "c" * 64


def _source(*names):
    peers = [_peers.Peer(name=n, url="http://10.0.0.%d:8370/m/c/" % i, share=frozenset()) for i, n in enumerate(names, 1)]
    # seed: this host's name, whose shuffled order puts a before b (the mirror order's tie-break)
    return _peers.PeerSource(peers, token=PEER_TOKEN, hub=None, hub_share=set(), wait_timeout=0, timeout=1,
                             opener=None, log=lambda msg: None, seed="gpu0"), peers


def test_a_multi_peer_mismatch_goes_one_peer_at_a_time_to_find_the_bad_one():
    source, peers = _source("a", "b")
    item = _Item("x.safetensors")
    res = source._to_peers(item, peers)  # pylint: disable=protected-access
    assert res.mirrors and res.header == "Authorization: Bearer %s" % PEER_TOKEN and res.origin == "peer:a"
    # True: a peer is to blame, the transfer counts no try for this round (review finding 4)
    assert source.settled(item, res, uri_errors={}, mismatch=True) is True
    assert source.dropped() == []  # which one lied is not known yet
    # one peer at a time, in this host's shuffled order: a first
    first = source._to_peers(item, peers)  # pylint: disable=protected-access
    assert first.mirrors == () and first.origin == "peer:a"
    assert source.settled(item, first, uri_errors={}, mismatch=True) is True
    assert [d["name"] for d in source.dropped()] == ["a"]
    # the bad one found, the file goes to all its (remaining) holders again
    second = source._to_peers(item, [p for p in peers if p.dropped is None])  # pylint: disable=protected-access
    assert second.origin == "peer:b" and second.mirrors == ()


def test_a_failed_uri_drops_its_peer_and_a_hub_download_drops_nobody():
    source, peers = _source("a", "b")
    item = _Item("x.safetensors")
    res = source._to_peers(item, peers)  # pylint: disable=protected-access
    assert source.settled(item, res, uri_errors={res.mirrors[0]: (1, "Connection refused", None)}, mismatch=False)
    assert source.dropped() == [{"name": "b", "reason": "GET x.safetensors: aria2 error 1: Connection refused"}]
    assert source.settled(item, res, uri_errors={}, mismatch=False) is False
    assert source.settled(item, _transfer.Resolution("http://cdn/x"), uri_errors={"http://cdn/x": (1, "x", None)},
                          mismatch=True) is False
    assert len(source.dropped()) == 1


def _no_hub_source(states):
    """hub=false; gpu1 owns x (its state: states['gpu1']), gpu2 has a share (Hub access), gpu3 none;
    no peer holds x yet; each status read answers from ``states`` (None: the peer is unreachable)."""
    peers = [_peers.Peer(name=n, url="http://10.0.0.%d:8370/m/c/" % i, share=frozenset(share), hub=bool(share))
             for i, (n, share) in enumerate((("gpu1", ["x.safetensors"]), ("gpu2", ["y.safetensors"]), ("gpu3", [])), 1)]
    source = _peers.PeerSource(peers, token=PEER_TOKEN, hub=None, hub_share=set(), wait_timeout=3600, timeout=1,
                               opener=None, log=lambda msg: None)
    source.book.holders = lambda items: {item.remote.path: [] for item in items}

    def refresh(peer):
        if states.get(peer.name) is None:
            source.book.drop(peer, "unreachable")
        else:
            peer.state = states[peer.name]
    source.book.refresh_status = refresh
    return source


@pytest.mark.parametrize("other", ["fetching", "unknown"])
def test_no_hub_waits_while_a_hub_peer_still_fetches_after_the_owner_failed(other):
    """Review finding 3: the owner failed (or is gone), but gpu2 with Hub access takes x from the Hub
    and publishes it: a host without Hub access waits for that instead of failing at once."""
    for owner in ("failed", None):
        states = {"gpu1": owner, "gpu2": other, "gpu3": "fetching"}
        source = _no_hub_source(states)
        [(dummy, res)] = source.resolve([_Item("x.safetensors")])
        assert res.wait and not res.final
        # gpu2 is done without x: nobody will publish it (gpu3 has no Hub access): fail now, saying why
        states["gpu2"] = "done"
        [(dummy, res)] = source.resolve([_Item("x.safetensors")])
        assert res.final and "no Hub access" in res.error and "x.safetensors" in res.error


def test_no_hub_takes_a_file_published_just_before_its_publisher_said_done():
    """The statuses are read after the HEADs: a Hub peer that published x and then wrote "done" in
    between is found by one last look, not reported as holding nothing."""
    states = {"gpu1": "failed", "gpu2": "fetching", "gpu3": "fetching"}
    source = _no_hub_source(states)
    looks = []

    def holders(items):
        looks.append(len(looks))
        # the first look (before the statuses) finds nobody; gpu2 then publishes x and says done
        states["gpu2"] = "done"
        return {item.remote.path: [source.book.peers[1]] if len(looks) > 2 else [] for item in items}
    source.book.holders = holders
    [(dummy, res)] = source.resolve([_Item("x.safetensors")])
    assert res.origin == "peer:gpu2" and res.url.startswith(source.book.peers[1].url) and len(looks) == 3


def test_no_hub_waits_for_a_hub_peer_with_an_empty_share():
    """More Hub hosts than files: a Hub host may get no share at all. It still takes a file whose owner
    failed from the Hub and publishes it, so a host without Hub access waits for it (its ``hub``)."""
    peers = _peers.parse_peers([
        {"name": "gpu1", "url": "http://10.0.0.1:8370/m/c/", "share": ["x.safetensors"]},
        {"name": "gpu2", "url": "http://10.0.0.2:8370/m/c/", "share": [], "hub": True},
        {"name": "gpu3", "url": "http://10.0.0.3:8370/m/c/", "share": []},
    ])
    assert [(p.name, p.hub) for p in peers] == [("gpu1", True), ("gpu2", True), ("gpu3", False)]
    states = {"gpu1": "failed", "gpu2": "fetching", "gpu3": "fetching"}
    source = _peers.PeerSource(peers, token=PEER_TOKEN, hub=None, hub_share=set(), wait_timeout=3600, timeout=1,
                               opener=None, log=lambda msg: None)
    source.book.holders = lambda items: {item.remote.path: [] for item in items}

    def refresh(peer):
        peer.state = states[peer.name]
    source.book.refresh_status = refresh
    [(dummy, res)] = source.resolve([_Item("x.safetensors")])
    assert res.wait and not res.final
    states["gpu2"] = "done"
    [(dummy, res)] = source.resolve([_Item("x.safetensors")])
    assert res.final and "no Hub access" in res.error


def test_no_hub_and_only_hosts_without_hub_access_left_fails_at_once():
    source = _no_hub_source({"gpu1": "failed", "gpu2": None, "gpu3": "fetching"})
    [(dummy, res)] = source.resolve([_Item("x.safetensors")])
    assert res.final and "its owner gpu1 is failed" in res.error


def test_a_run_waiting_for_the_lock_leaves_the_live_runs_peer_status_alone(tmp_path):
    """Review (smaller): the status is written only once the lock is held; a run that times out on it
    wrote "failed" over the live run's "fetching", and the peers took that run's share from the Hub."""
    dest = tmp_path / "d"
    listing = [{"path": "config.json", "size": 3, "sha256": None, "blob_id": "a" * 40}]
    with _manifest.DirLock(str(dest)):
        _peers.write_status(str(dest), "fetching")
        with pytest.raises(_snapshot.SnapshotError) as err:
            _snapshot.snapshot(dict(repo_id=TARGET, dest=str(dest), revision="c" * 40, listing=listing, hub=False,
                                    peers=[], lock_timeout=0, min_free_bytes=0))
    assert "lock" in err.value.msg
    assert status_of(dest) == {"state": "fetching", "failed": []}


def test_same_content_under_two_paths_counts_its_bytes_once():
    """Review (smaller): the transfer fetches a content key once and hard-links the other paths; the
    bytes per source counted each path, so a duplicate shard doubled bytes_from_peers."""
    shard, config = b"s" * 1000, b"{}"
    items = [sf.item_for("/d", rel, data, lfs) for rel, data, lfs in
             (("a.safetensors", shard, True), ("copy/a.safetensors", shard, True), ("config.json", config, False))]
    for item in items:
        item.action = "fetch"
    duplicates = _run_result.same_bytes(items)
    assert duplicates == {"copy/a.safetensors"}
    rows = [{"path": it.remote.path, "size": it.remote.size, "source": src}
            for it, src in zip(items, ("peer:gpu2", "peer:gpu2", "hub"))]
    assert _run_result.source_bytes(rows, duplicates) == {"bytes_from_hub": len(config), "bytes_from_peers": len(shard),
                                                          "from_peers": {"gpu2": len(shard)}}
    # a path planned as present or linked moved nothing of its own either way
    items[0].action = "present"
    assert _run_result.same_bytes(items) == set()


def test_a_run_counts_a_duplicate_paths_bytes_once(lab_hub, seed, peers, tmp_path):
    """The same through snapshot(): a listing with one shard's content under a second path; the run
    fetches it once (the second path is a hard link), and the result counts its bytes once."""
    commit, listing, seed_dir = seed
    first = next(e for e in listing if e["path"] == SHARDS[0])
    dup = dict(first, path="copy/" + SHARDS[0])
    (seed_dir / "copy").mkdir()
    os.link(seed_dir / SHARDS[0], seed_dir / dup["path"])
    full = listing + [dup]
    one = peers("gpu2", [e["path"] for e in listing], seed_dir, "127.0.0.3")
    os.mkdir(os.path.join(one.root, "copy"))
    os.link(seed_dir / dup["path"], os.path.join(one.root, dup["path"]))
    one.status("done")
    dest = tmp_path / "d"
    # hub=false: the duplicate path is not on the Hub, so a host with Hub access would refuse this listing
    res = run(lab_hub, dest, **peer_args(commit, full, ("gpu2", one), hub_share=[], hub=False))
    total = sum(e["size"] for e in listing)
    assert res["bytes_from_hub"] == 0 and res["bytes_from_peers"] == total and res["from_peers"] == {"gpu2": total}
    # what really moved: the shard's content through one of its two paths (the other is a hard link)
    assert len({e["path"] for e in one.log if e["method"] == "GET" and e["path"].endswith("/" + SHARDS[0])}) == 1
    assert_tree_verified(dest, full)
    assert os.path.samefile(dest / SHARDS[0], dest / dup["path"])


@pytest.mark.parametrize("peers, needle", [
    ([{"name": "a", "url": "http://10.0.0.1:8370/m/c/", "share": [], "hub": "yes"}], "hub must be true or false"),
    ([{"name": "a", "url": "http://10.0.0.1:8370/m/c"}], "ending in '/'"),
    ([{"name": "a", "url": "ftp://10.0.0.1/m/c/"}], "http(s) URL"),
    ([{"name": "a b", "url": "http://10.0.0.1/m/c/"}], "host name"),
    ([{"url": "http://10.0.0.1/m/c/"}], "dict with name, url and share"),
    ([{"name": "a", "url": "http://10.0.0.1/c/", "share": "x"}], "share must be a list"),
    ([{"name": "a", "url": "http://10.0.0.1/c/"}, {"name": "a", "url": "http://10.0.0.2/c/"}], "given twice"),
])
def test_bad_peers_fail_before_any_request(peers, needle):
    with pytest.raises(_snapshot.SnapshotError) as err:
        _peers.parse_peers(peers)
    assert needle in err.value.msg


def test_peer_token_is_required_with_peers(tmp_path):
    with pytest.raises(_snapshot.SnapshotError) as err:
        _snapshot.snapshot(dict(repo_id=TARGET, dest=str(tmp_path / "d"), revision="a" * 40, listing=[],
                                peers=[{"name": "a", "url": "http://10.0.0.1/c/"}]))
    assert "peer_token" in err.value.msg


def test_aria2_gets_mirrors_and_the_header_in_its_input_file_only():
    files = [_aria2.Aria2File("k", "http://10.0.0.1:8370/c/a.bin", "/d/s", "k", None, 5,
                              ("http://10.0.0.2:8370/c/a.bin",), "Authorization: Bearer %s" % PEER_TOKEN),
             _aria2.Aria2File("h", "http://cdn/b?sig=1", "/d/s", "h", None, 5)]
    text = _aria2.render_input(files, proxy="http://proxy:3128")
    lines = text.splitlines()
    assert lines[0] == "http://10.0.0.1:8370/c/a.bin\thttp://10.0.0.2:8370/c/a.bin"
    block = text.split("http://cdn/b?sig=1")
    assert "header=Authorization: Bearer %s" % PEER_TOKEN in block[0] and "no-proxy=10.0.0.1,10.0.0.2" in block[0]
    assert "all-proxy" not in block[0] and "header" not in block[1] and "all-proxy=http://proxy:3128" in block[1]
    argv = _aria2.build_argv("aria2c", "/d/in", "/d/log", connections=4, splits=4, parallel_files=2,
                             min_split_size="1M", timeout=5, retry_wait=1, validate_certs=True, ca_path=None)
    assert not any(PEER_TOKEN in arg or "header" in arg for arg in argv)


# ----------------------------------------------------------------------------- issue 20 item 7
def test_a_dropped_peers_partial_bytes_are_discarded_and_the_honest_peer_is_not_blamed(lab_hub, seed, peers, tmp_path):
    """Issue 20 item 7: a peer serving wrong bytes dies after 4 MiB of a shard. Its partial bytes stayed
    in staging and the honest peer's download resumed them (aria2 --continue), so the honest peer's
    bytes failed the hash and it was dropped too. The partial must be discarded when its source goes."""
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[0]]
    bad = peers("bad", [SHARDS[0]], seed_dir, "127.0.0.3", corrupt=True, die_after=4 << 20)
    good = peers("good", [SHARDS[0]], seed_dir, "127.0.0.4")
    for server in (bad, good):
        server.status("done")
    dest = tmp_path / "d"
    logs = []
    params = dict(repo_id=TARGET, dest=str(dest), endpoint=lab_hub.api, min_free_bytes=0, retry_wait=0, connections=4,
                  splits=4, min_split_size="1M", max_tries=1)
    params.update(peer_args(commit, shard, ("bad", bad), ("good", good), hub_share=[], peer_name=BAD_FIRST))
    res = _snapshot.snapshot(params, log=logs.append)
    assert [d["name"] for d in res["peers_dropped"]] == ["bad"]
    assert not [line for line in logs if "good" in line and "dropped" in line]
    assert [r["source"] for r in res["files"]] == ["peer:good"] and res["from_peers"] == {"good": shard[0]["size"]}
    assert res["bytes_from_hub"] == 0 and hub_files(lab_hub, listing) == set()
    assert_tree_verified(dest, shard)


def test_a_hub_resume_after_a_dropped_peer_starts_clean_and_uses_no_try(lab_hub, seed, peers, tmp_path):
    """Item 7, the Hub side: the Hub resumed the dropped peer's wrong bytes, failed the hash and lost a
    try (with max_tries 1, the run). It must start the file clean instead."""
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[0]]
    bad = peers("bad", [SHARDS[0]], seed_dir, "127.0.0.3", corrupt=True, die_after=4 << 20)
    bad.status("done")
    dest = tmp_path / "d"
    res = run(lab_hub, dest, max_tries=1, **peer_args(commit, shard, ("bad", bad), hub_share=[]))
    assert [r["source"] for r in res["files"]] == ["hub"] and [d["name"] for d in res["peers_dropped"]] == ["bad"]
    assert res["from_peers"] == {} and res["bytes_from_hub"] == shard[0]["size"]
    assert_tree_verified(dest, shard)


def test_an_earlier_runs_partial_that_fails_the_hash_blames_nobody(lab_hub, seed, peers, tmp_path):
    """Bytes a failed earlier run left in staging (here: a corrupting peer's, cut mid-file) are resumed;
    when the result fails the hash, the peer of this run that resumed them is not dropped and no try is
    used: the file starts clean and lands."""
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[0]]
    bad = peers("bad", [SHARDS[0]], seed_dir, "127.0.0.3", corrupt=True, die_after=2 << 20)
    bad.status("done")
    dest = tmp_path / "d"
    with pytest.raises(_snapshot.SnapshotError):
        run(lab_hub, dest, max_tries=1, hub=False, **peer_args(commit, shard, ("bad", bad)))
    staging = dest / ".gpufleet" / "staging"
    assert (staging / (shard[0]["sha256"] + ".aria2")).exists()  # the earlier run's partial, resumable
    good = peers("good", [SHARDS[0]], seed_dir, "127.0.0.4")
    good.status("done")
    res = run(lab_hub, dest, max_tries=1, hub=False, **peer_args(commit, shard, ("good", good)))
    assert res["peers_dropped"] == [] and [r["source"] for r in res["files"]] == ["peer:good"]
    assert_tree_verified(dest, shard)


# ----------------------------------------------------------------------------- issue 20 item 14 (a, b)
def test_a_peer_answering_503_twice_is_not_dropped_and_gets_the_credit(lab_hub, seed, peers, tmp_path):
    """14a/14b: aria2 asked the peer again after two 503s and got the file, yet the peer was dropped for
    the URI error, and the verified bytes were credited to that dropped peer."""
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[0]]
    busy = peers("gpu2", [SHARDS[0]], seed_dir, "127.0.0.3", fail_first={"status": 503, "count": 2})
    busy.status("done")
    res = run(lab_hub, tmp_path / "d", connections=1, splits=1,
              **peer_args(commit, shard, ("gpu2", busy), hub_share=[]))
    assert busy.failures_left == 0  # both 503s were answered
    assert res["peers_dropped"] == [] and res["from_peers"] == {"gpu2": shard[0]["size"]}
    assert [r["source"] for r in res["files"]] == ["peer:gpu2"] and hub_files(lab_hub, listing) == set()
    assert_tree_verified(tmp_path / "d", shard)


def test_a_peer_that_stays_overloaded_through_aria2s_tries_is_asked_again_next_round(lab_hub, seed, peers, tmp_path):
    """14a: aria2 gives up after its own 5 tries; the peer is asked again next round (no try of the file
    used, max_tries 1), not dropped for the rest of the fetch."""
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[0]]
    busy = peers("gpu2", [SHARDS[0]], seed_dir, "127.0.0.3", fail_first={"status": 503, "count": 6})
    busy.status("done")
    res = run(lab_hub, tmp_path / "d", connections=1, splits=1, max_tries=1,
              **peer_args(commit, shard, ("gpu2", busy), hub_share=[]))
    assert busy.failures_left == 0
    assert res["peers_dropped"] == [] and [r["source"] for r in res["files"]] == ["peer:gpu2"]
    assert hub_files(lab_hub, listing) == set()
    assert_tree_verified(tmp_path / "d", shard)


def test_a_peer_that_keeps_answering_429_is_dropped_after_its_retries_and_the_hub_serves(lab_hub, seed, peers, tmp_path):
    """14a: bounded. aria2 does not retry a 429 itself; the peer gets PEER_RETRIES more rounds, then is
    dropped, and the file comes from the Hub without using a try."""
    commit, listing, seed_dir = seed
    shard = [e for e in listing if e["path"] == SHARDS[0]]
    busy = peers("gpu2", [SHARDS[0]], seed_dir, "127.0.0.3", fail_first={"status": 429, "count": 10 ** 6})
    busy.status("done")
    res = run(lab_hub, tmp_path / "d", connections=1, splits=1, max_tries=1,
              **peer_args(commit, shard, ("gpu2", busy), hub_share=[]))
    # the GETs that got their 429 (counted before the answer): one per round, PEER_RETRIES more rounds
    assert 10 ** 6 - busy.failures_left == _peerbook.PEER_RETRIES + 1
    assert [d["name"] for d in res["peers_dropped"]] == ["gpu2"] and "429" in res["peers_dropped"][0]["reason"]
    assert [r["source"] for r in res["files"]] == ["hub"] and res["from_peers"] == {}
    assert_tree_verified(tmp_path / "d", shard)


def _live_source(servers, *, retry_wait=1.0):
    """A PeerSource over real loopback PeerServers; its backoff waits are recorded, never slept."""
    waits = []
    peer_list = [_peers.Peer(name=name, url=server.url, share=frozenset()) for name, server in servers]
    source = _peers.PeerSource(peer_list, token=PEER_TOKEN, hub=None, hub_share=set(), wait_timeout=0, timeout=10,
                               opener=_peers.peer_opener(), log=lambda msg: None, retry_wait=retry_wait,
                               sleep=waits.append)
    return source, peer_list, waits


def test_a_head_answered_503_is_asked_again_with_a_growing_backoff(seed, peers):
    commit, listing, seed_dir = seed
    entry = next(e for e in listing if e["path"] == SHARDS[0])
    busy = peers("gpu2", [SHARDS[0]], seed_dir, "127.0.0.3",
                 fail_first={"status": 503, "count": 2, "methods": ("HEAD",)})
    source, peer_list, waits = _live_source([("gpu2", busy)])
    item = _Item(SHARDS[0], size=entry["size"])
    assert source.book.holders([item]) == {SHARDS[0]: peer_list}
    assert waits == [1.0, 2.0] and source.dropped() == []
    # its status read (404: no status, so no list of what it holds), then the HEAD and its two retries
    assert busy.requests == 4 and busy.failures_left == 0


def test_a_head_that_stays_503_drops_the_peer_after_its_retries(seed, peers):
    commit, listing, seed_dir = seed
    entry = next(e for e in listing if e["path"] == SHARDS[0])
    busy = peers("gpu2", [SHARDS[0]], seed_dir, "127.0.0.3",
                 fail_first={"status": 503, "count": 10 ** 6, "methods": ("HEAD",)})
    source, peer_list, waits = _live_source([("gpu2", busy)])
    assert source.book.holders([_Item(SHARDS[0], size=entry["size"])]) == {SHARDS[0]: []}
    assert waits == [1.0, 2.0, 4.0] and busy.requests == 1 + _peerbook.PEER_RETRIES + 1
    assert source.dropped() == [{"name": "gpu2", "reason": "HEAD %s: HTTP 503 (4 tries)" % SHARDS[0]}]


def test_a_peer_refusing_the_runs_token_is_dropped_at_once(seed, peers):
    """401 with the run's token: every request carries the same token, so asking again cannot help."""
    commit, listing, seed_dir = seed
    entry = next(e for e in listing if e["path"] == SHARDS[0])
    stale = peers("gpu2", [SHARDS[0]], seed_dir, "127.0.0.3")
    stale.token = "the token of an earlier run"
    source, peer_list, waits = _live_source([("gpu2", stale)])
    assert source.book.holders([_Item(SHARDS[0], size=entry["size"])]) == {SHARDS[0]: []}
    # the first request (its status) is refused: dropped there, no HEAD sent
    assert waits == [] and stale.requests == 1
    assert source.dropped() == [{"name": "gpu2", "reason": "peer-status: HTTP 401"}]


def test_a_status_read_answered_503_is_asked_again(seed, peers):
    commit, listing, seed_dir = seed
    busy = peers("gpu2", [], seed_dir, "127.0.0.3",
                 fail_first={"status": 503, "count": 1, "paths": [".gpufleet/peer-status.json"]})
    busy.status("fetching")
    source, peer_list, waits = _live_source([("gpu2", busy)], retry_wait=0)
    source.book.refresh_status(peer_list[0])
    assert peer_list[0].state == "fetching" and source.dropped() == [] and waits == [0]


@pytest.mark.parametrize("error, passing", [
    ((29, "The response status is not successful. status=503", 503), True),
    ((22, "The response status is not successful. status=429", 429), True),
    ((2, "Timeout.", None), True),
    ((1, "Connection reset by peer", None), True),
    ((1, "Failed to establish connection, cause: Connection refused", None), False),
    ((24, "Authorization failed.", None), False),
    ((22, "The response status is not successful. status=403", 403), False),
    ((3, "Resource not found", 404), False),
])
def test_which_aria2_uri_errors_are_passing(error, passing):
    assert _peerbook.passing_uri_error(*error) is passing


def test_a_passing_fault_on_a_failed_file_strikes_then_drops_and_a_placed_file_resets():
    source, peer_list = _source("a")
    item = _Item("x.safetensors")
    res = source._to_peers(item, peer_list)  # pylint: disable=protected-access
    timeout = {res.url: (2, "Timeout.", None)}
    for strike in range(1, _peerbook.PEER_RETRIES + 1):
        assert source.settled(item, res, uri_errors=timeout, mismatch=False, failed=True) is True
        assert peer_list[0].strikes == strike and source.dropped() == []
    assert source.settled(item, res, uri_errors={}, mismatch=False, failed=False) is False
    assert peer_list[0].strikes == 0
    for dummy in range(_peerbook.PEER_RETRIES + 1):
        source.settled(item, res, uri_errors=timeout, mismatch=False, failed=True)
    assert [d["name"] for d in source.dropped()] == ["a"] and "rounds in a row" in source.dropped()[0]["reason"]


def test_a_file_is_credited_to_the_mirror_that_served_it_not_to_one_that_failed():
    """14b: of two mirrors, the first died (dropped); the second finished the file and gets the credit."""
    source, peer_list = _source("a", "b")
    item = _Item("x.safetensors")
    res = source._to_peers(item, peer_list)  # pylint: disable=protected-access
    assert res.origin == "peer:a"
    died = {res.url: (1, "Failed to establish connection, cause: Connection refused", None)}
    assert source.credited(res, died) == "peer:b"
    assert source.credited(res, {}) == "peer:a"
    assert source.credited(res, {res.url: (29, "status=503", 503), res.mirrors[0]: (1, "Connection refused", None)}) == "peer:a"
    assert source.credited(_transfer.Resolution("http://cdn/x"), {}) == "hub"


# ----------------------------------------------------------------------------- issue 20 item 14 (c)
GATED = "gpufleet-lab/Kimi-K2.6-mini-gated"
TOKEN_READER = "hf_labREADERfakeTOKENnotAsecret000001"  # tests/lab/fixtures.py, lab-only, fake


def test_resolve_only_says_whether_the_listing_needed_the_token(lab_hub, tmp_path):
    assert listed(lab_hub, tmp_path, allow_patterns=["config.json"])["token_required"] is False
    res = listed(lab_hub, tmp_path, repo_id=GATED, token=TOKEN_READER, allow_patterns=["config.json"])
    assert res["token_required"] is True


@pytest.fixture
def gated_listing(lab_hub, tmp_path):
    res = listed(lab_hub, tmp_path, repo_id=GATED, token=TOKEN_READER, allow_patterns=["*.json"])
    lab_hub.reset()
    return res["commit"], [{k: row[k] for k in ("path", "size", "sha256", "blob_id")} for row in res["files"]]


def test_a_gated_repo_is_not_fetched_with_peers_unless_peer_private(lab_hub, peers, tmp_path):
    """14c: the listing this host made needed the token: refused before dest or any peer is touched."""
    owner = peers("gpu2", [], tmp_path, "127.0.0.3")
    dest = tmp_path / "d"
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest, repo_id=GATED, token=TOKEN_READER, allow_patterns=["*.json"], peer_token=PEER_TOKEN,
            peers=[{"name": "gpu2", "url": owner.url, "share": []}])
    assert GATED in err.value.msg and "peer_private" in err.value.msg and "model_peer_private_repos" in err.value.msg
    assert TOKEN_READER not in err.value.msg and PEER_TOKEN not in err.value.msg
    assert not dest.exists() and owner.log == []


def test_a_handed_over_listing_that_needed_the_token_is_refused_before_any_request(
        lab_hub, gated_listing, peers, tmp_path):
    commit, listing = gated_listing
    owner = peers("gpu2", [], tmp_path, "127.0.0.3")
    dest = tmp_path / "d"
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest, repo_id=GATED, token=TOKEN_READER, listing_token_required=True, hub=False,
            **peer_args(commit, listing, ("gpu2", owner)))
    assert "peer_private" in err.value.msg
    assert not dest.exists() and owner.log == [] and lab_hub.log() == []


def test_a_gated_repo_is_found_out_even_when_the_caller_did_not_say(lab_hub, gated_listing, peers, tmp_path):
    """The caller did not pass listing_token_required: a host with Hub access asks the Hub for one file
    without the token (a gated repo lists without it), and refuses before anything moved."""
    commit, listing = gated_listing
    owner = peers("gpu2", [], tmp_path, "127.0.0.3")
    owner.status("done")
    dest = tmp_path / "d"
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest, repo_id=GATED, token=TOKEN_READER,
            **peer_args(commit, listing, ("gpu2", owner), hub_share=[e["path"] for e in listing], allow_patterns=["*.json"]))
    assert "peer_private" in err.value.msg and TOKEN_READER not in err.value.msg
    assert not dest.exists() and owner.log == []
    # besides the listing this host holds the handed-over one against (issue 20 item 1): one tokenless HEAD
    assert [e["method"] for e in lab_hub.log() if not e["path"].startswith("/api/")] == ["HEAD"]


def test_a_hub_that_answers_a_file_only_with_the_token_stops_a_peer_fetch():
    """Belt and braces, at fetch time: once the Hub source had to send the token, the peer source
    refuses to go on without peer_private."""
    class Hub(object):
        send_token = False

        def resolve(self, items):
            self.send_token = True  # the Hub refused the file without the token: asked again with it
            return [(item, _transfer.Resolution("http://cdn/x")) for item in items]

    peer_list = [_peers.Peer(name="a", url="http://10.0.0.1:8370/m/c/", share=frozenset())]
    source = _peers.PeerSource(peer_list, token=PEER_TOKEN, hub=Hub(), hub_share={"x.safetensors"}, wait_timeout=0,
                               timeout=1, opener=None, log=lambda msg: None, repo_id="org/gated")
    source.book.holders = lambda items: {item.remote.path: [] for item in items}
    with pytest.raises(_snapshot.SnapshotError) as err:
        source.resolve([_Item("x.safetensors")])
    assert "org/gated needs the token" in err.value.msg and "peer_private" in err.value.msg
    source.private = True
    [(dummy, res)] = source.resolve([_Item("x.safetensors")])
    assert res.url == "http://cdn/x"


def test_peer_private_lets_a_gated_repo_use_the_peers(lab_hub, gated_listing, peers, tmp_path):
    commit, listing = gated_listing
    owner = peers("gpu2", [], tmp_path, "127.0.0.3")
    owner.status("done")
    dest = tmp_path / "d"
    res = run(lab_hub, dest, repo_id=GATED, token=TOKEN_READER, listing_token_required=True, peer_private=True,
              **peer_args(commit, listing, ("gpu2", owner), hub_share=[e["path"] for e in listing], allow_patterns=["*.json"]))
    assert res["changed"] and {r["source"] for r in res["files"]} == {"hub"}
    assert_tree_verified(dest, listing)
