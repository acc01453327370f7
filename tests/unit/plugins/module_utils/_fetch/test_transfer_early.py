# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rounds.Round places (and publishes) a file aria2 finished as soon as its hash matched, while the
batch's aria2c still runs (issue 23); the source's credit and bookkeeping still come once aria2 has
ended, for every file. Without a network: aria2 stand-ins driven by events, never by time (the real
aria2c and a peer server: test_snapshot_peers)."""
from __future__ import annotations

import os
from concurrent.futures import Future

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import aria2 as _aria2
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import rounds as _rounds
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _snapshot_staging
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import transfer as _transfer
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils._fetch.test_transfer import (
    SHARD, CONFIG, fetch_items, ok, transfer_for)
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import snapshot_files as sf


class PeerLike(object):
    """A peer-like source: every file from ``peer:gpu2`` with ``peer:gpu3`` as its mirror; records when each
    file was placed (``placed``, what a peer source publishes on) and settled, and credits gpu3."""

    def __init__(self):
        self.events = []

    def resolve(self, items):
        return [(item, _transfer.Resolution("http://gpu2/" + item.remote.path, mirrors=("http://gpu3/" + item.remote.path,),
                                            origin="peer:gpu2")) for item in items]

    def placed(self, item):
        self.events.append(("placed", item.remote.path))

    def credited(self, res, uri_errors):
        return "peer:gpu3" if res.url in uri_errors else res.origin

    def settled(self, item, res, *, uri_errors, mismatch, failed=True):
        self.events.append(("settled", item.remote.path, res.origin, mismatch, failed))
        return False


class InlinePool(object):
    """The round's hash pool, hashing in the caller's thread: a file's hash is done when on_complete returns."""

    def __init__(self, max_workers=None):
        self.max_workers = max_workers

    def submit(self, fn, *args):
        return _done(fn(*args))

    def shutdown(self, wait=True):
        pass


def test_a_verified_file_is_placed_and_published_while_the_batch_still_downloads(tmp_path, monkeypatch):
    dest = tmp_path / "d"
    items = fetch_items(dest, ("config.json", CONFIG, False), ("a.safetensors", SHARD, True))
    source = PeerLike()
    transfer = transfer_for(dest, items, source)
    monkeypatch.setattr(_rounds, "ThreadPoolExecutor", InlinePool)
    during = []

    def aria2_run(jobs, workdir, settings, *, on_complete, poll, **dummy_kwargs):
        by_key = {job.key: job for job in jobs}
        small, large = items[0].key, items[1].key
        sf.write(by_key[small].dir, by_key[small].out, CONFIG)
        on_complete(small)  # hashed (InlinePool): the next poll places it
        poll()
        poll()  # polled again: nothing is placed twice
        during.append((list(source.events), os.path.isfile(items[0].final), os.path.exists(transfer.staged(items[1]))))
        sf.write(by_key[large].dir, by_key[large].out, SHARD)
        on_complete(large)
        # gpu2 failed on the shard along the way (gpu3, its mirror, served it to its end): known only now
        return _aria2.RunResult(0, "", {small: ok(), large: ok()}, 0, "",
                                {"http://gpu2/a.safetensors": (6, "Connection reset by peer", None)})

    monkeypatch.setattr(_aria2, "run", aria2_run)
    assert transfer.run() == {}
    # config.json in place and published while aria2 still ran, the shard not even written yet
    assert during == [([("placed", "config.json")], True, False)]
    assert source.events[1:] == [("settled", "config.json", "peer:gpu2", False, False), ("placed", "a.safetensors"),
                                 ("settled", "a.safetensors", "peer:gpu3", False, False)]
    assert transfer.origins == {items[0].key: "peer:gpu2", items[1].key: "peer:gpu3"}
    for item, data in zip(items, (CONFIG, SHARD)):
        with open(item.final, "rb") as handle:
            assert handle.read() == data


def _done(value=None, error=None):
    future = Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


def test_only_a_finished_untouched_matching_file_is_placed_early_and_only_once(tmp_path):
    dest = tmp_path / "d"
    specs = [("%s.safetensors" % name, (name * 2000).encode(), True)
             for name in ("ctrl", "bad", "touched", "busy", "raised", "good")]
    items = fetch_items(dest, *specs)
    placed = []
    source = PeerLike()
    source.placed = lambda item: placed.append(item.remote.path)
    transfer = transfer_for(dest, items, source)
    rnd = _rounds.Round(transfer)
    rnd.batch = {item.key: item for item in items}
    _snapshot_staging.make_staging(str(dest))
    for item, (rel, data, dummy) in zip(items, specs):
        sf.write(transfer.staging, item.key, data if rel != "bad.safetensors" else b"\0" * len(data))
        rnd.hashes[item.key] = _done(_snapshot_staging.hash_staged(transfer.staged(item), item.remote))
    ctrl, bad, touched, busy, raised, good = items
    sf.write(transfer.staging, ctrl.key + ".aria2", b"ctl")  # aria2 has not removed its control file yet
    os.utime(transfer.staged(touched), ns=(0, 10**9))  # written to after its hash
    rnd.hashes[busy.key] = Future()  # still hashing
    rnd.hashes[raised.key] = _done(error=OSError("read error"))
    rnd._place_verified()  # pylint: disable=protected-access
    rnd._place_verified()  # pylint: disable=protected-access
    assert placed == ["good.safetensors"] and rnd.early == {good.key}
    assert good.stat is not None and os.path.isfile(good.final) and not os.path.exists(transfer.staged(good))
    for item in (ctrl, bad, touched, busy, raised):
        assert item.stat is None and not os.path.lexists(item.final) and os.path.exists(transfer.staged(item))
    os.unlink(transfer.staged(ctrl) + ".aria2")  # aria2 is through with it: the next poll places it
    rnd._place_verified()  # pylint: disable=protected-access
    assert placed == ["good.safetensors", "ctrl.safetensors"] and transfer.errors == {}
