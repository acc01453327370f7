# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_transfer without aria2c or a Hub: a source of our own, rounds and retries, aria2 outcomes settled
by exit code, and the Hub source's decisions (the end-to-end runs are in test_snapshot.py)."""
from __future__ import annotations

import hashlib
import http.client
import os

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import aria2 as _aria2
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _snapshot_plan
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _snapshot_staging
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import transfer as _transfer
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import rounds as _rounds
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import direct as _transfer_direct
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.progress import Progress, Timings
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import snapshot_files as sf

SHARD = b"shard " * 2000
CONFIG = b'{"a": 1}\n'


class DictSource(object):
    """Serves bytes from a dict by URL, in-process; ``bad`` URLs serve wrong bytes ``bad[url]`` times."""

    def __init__(self, blobs, bad=None, refuse=()):
        self.blobs = blobs
        self.bad = dict(bad or {})
        self.refuse = set(refuse)
        self.resolved = []
        self.downloads = []

    def resolve(self, items):
        self.resolved.append(sorted(item.remote.path for item in items))
        out = []
        for item in items:
            if item.remote.path in self.refuse:
                out.append((item, _transfer.Resolution(None, error="resolve: 503 busy", retry_after=0.0)))
            else:
                out.append((item, _transfer.Resolution("mem://" + item.remote.path, direct=True)))
        return out

    def download(self, url, out_path, size=None):
        self.downloads.append(url)
        data = self.blobs[url]
        if self.bad.get(url):
            self.bad[url] -= 1
            data = b"\0" * len(data)
        with open(out_path, "wb") as handle:
            handle.write(data)


def transfer_for(dest, items, source, max_tries=3, logs=None):
    staging = _snapshot_staging.staging_dir(str(dest))
    progress = Progress(str(dest), staging=staging, repo_id="org/m", commit="c" * 40,
                        items=list(_snapshot_plan.unique_fetches(items).values()))
    aria2 = _aria2.Aria2Settings(aria2c="/nonexistent/aria2c", connections=1, splits=1, parallel_files=1,
                                 min_split_size="1M", timeout=5, retry_wait=0, validate_certs=True, ca_path=None,
                                 proxy=None)
    return _transfer.Transfer(items, dest=str(dest), source=source, aria2=aria2, max_tries=max_tries, retry_wait=0,
                              hash_workers=2, progress=progress, timings=Timings(),
                              log=(logs.append if logs is not None else lambda msg: None))


def fetch_items(dest, *specs):
    items = [sf.item_for(dest, rel, data, lfs) for rel, data, lfs in specs]
    for item in items:
        item.action = "fetch"
    return items


def test_a_source_of_our_own_fills_the_tree(tmp_path):
    dest = tmp_path / "d"
    items = fetch_items(dest, ("a.safetensors", SHARD, True), ("copy/a.safetensors", SHARD, True),
                        ("config.json", CONFIG, False))
    source = DictSource({"mem://a.safetensors": SHARD, "mem://config.json": CONFIG})
    transfer = transfer_for(dest, items, source)
    assert transfer.run() == {}
    assert source.resolved == [["a.safetensors", "config.json"]]  # the same bytes travel once
    assert sorted(source.downloads) == ["mem://a.safetensors", "mem://config.json"]
    for item, data in zip(items, (SHARD, SHARD, CONFIG)):
        with open(item.final, "rb") as handle:
            assert handle.read() == data
        assert item.stat is not None and item.sha256 == hashlib.sha256(data).hexdigest()
    assert os.stat(items[0].final).st_ino == os.stat(items[1].final).st_ino
    assert set(transfer.timings.as_dict()) == {"resolve"}


def test_wrong_bytes_never_reach_their_path_and_are_retried(tmp_path):
    dest = tmp_path / "d"
    items = fetch_items(dest, ("a.safetensors", SHARD, True), ("config.json", CONFIG, False))
    logs = []
    source = DictSource({"mem://a.safetensors": SHARD, "mem://config.json": CONFIG}, bad={"mem://a.safetensors": 1})
    assert transfer_for(dest, items, source, logs=logs).run() == {}
    assert source.resolved == [["a.safetensors", "config.json"], ["a.safetensors"]]
    assert logs == ["1 file(s) not done after try 1/3, next try in 0 s"]
    with open(items[0].final, "rb") as handle:
        assert handle.read() == SHARD


def test_failures_after_the_last_try_name_each_file(tmp_path):
    dest = tmp_path / "d"
    items = fetch_items(dest, ("a.safetensors", SHARD, True), ("b/a.safetensors", SHARD, True),
                        ("config.json", CONFIG, False))
    source = DictSource({"mem://a.safetensors": SHARD, "mem://config.json": CONFIG},
                        bad={"mem://a.safetensors": 5}, refuse={"config.json"})
    failed = transfer_for(dest, items, source, max_tries=2).run()
    assert failed == {"a.safetensors": "downloaded bytes do not match the Hub's id",
                      "b/a.safetensors": "downloaded bytes do not match the Hub's id",  # its duplicate
                      "config.json": "resolve: 503 busy"}
    assert len(source.resolved) == 2 and not any(os.path.lexists(it.final) for it in items)
    with open(str(dest / ".gpufleet" / "progress.json")) as handle:
        assert "retrying 2 file(s) in 0 s: a.safetensors: downloaded bytes" in handle.read()


def test_a_whole_leftover_is_placed_without_asking_the_source(tmp_path):
    dest = tmp_path / "d"
    items = fetch_items(dest, ("a.safetensors", SHARD, True))
    sf.write(_snapshot_staging.staging_dir(str(dest)), items[0].key, SHARD)  # an earlier run finished it
    source = DictSource({})
    assert transfer_for(dest, items, source).run() == {}
    assert source.resolved == [] and items[0].resumed and items[0].stat is not None


class Outcomes(object):
    """One _Round over one staged file, settled by the aria2 outcome a test gives."""

    def __init__(self, tmp_path, monkeypatch):
        self.dest = tmp_path / "d"
        self.item = fetch_items(self.dest, ("a.safetensors", SHARD, True))[0]
        self.transfer = transfer_for(self.dest, [self.item], DictSource({}))
        self.staged = self.transfer.staged(self.item)
        self.hashed = []
        real = _snapshot_plan.verify_local
        monkeypatch.setattr(_snapshot_plan, "verify_local", lambda *a: self.hashed.append(a[0]) or real(*a))

    def settle(self, data, outcome, ctrl=False, hashed=None):
        """``data``: what aria2 left in staging (None: leave the staged file as it is)."""
        if data is not None:
            sf.write(os.path.dirname(self.staged), os.path.basename(self.staged), data)
        if ctrl:
            sf.write(os.path.dirname(self.staged), os.path.basename(self.staged) + ".aria2", b"ctl")
        _rounds.Round(self.transfer)._settle(self.item, outcome, hashed)  # pylint: disable=protected-access
        return self.transfer.errors.get("a.safetensors")


def ok():
    return _aria2.FileOutcome("OK", None, None, None)


def err(code, http_status=None):
    return _aria2.FileOutcome("ERR", code, _aria2.explain(code), http_status)


def test_outcomes_settled_by_aria2_exit_code(tmp_path, monkeypatch):
    o = Outcomes(tmp_path, monkeypatch)
    # checksum failed / cannot resume / control file unusable: start over
    for code in (32, 8, 10):
        assert o.settle(SHARD[:100], err(code), ctrl=True) == "aria2 exit %d: %s" % (code, _aria2.explain(code))
        assert not os.path.exists(o.staged) and not os.path.exists(o.staged + ".aria2")
    # a network error: the partial and its control file stay for aria2 to resume
    assert o.settle(SHARD[:100], err(6), ctrl=True) == "aria2 exit 6: network problem"
    assert os.path.exists(o.staged) and os.path.exists(o.staged + ".aria2")
    # an expired signed URL: said so, resolved again next round
    assert o.settle(SHARD[:100], err(22, http_status=403), ctrl=True).endswith(
        "(signed URL expired or refused: re-resolving)")
    # OK in aria2's table but its control file is still there: not whole
    assert o.settle(SHARD, _aria2.FileOutcome("OK", None, "aria2 stopped before this file finished", None),
                    ctrl=True) == "aria2 stopped before this file finished"
    assert o.item.stat is None and o.hashed == []
    with pytest.raises(SnapshotError) as exc:
        o.settle(SHARD[:100], err(9), ctrl=True)
    assert "disk under" in exc.value.msg and "a.safetensors" in exc.value.msg


def test_whole_files_settled_by_size_and_hash(tmp_path, monkeypatch):
    o = Outcomes(tmp_path, monkeypatch)
    assert o.settle(SHARD[:-1], ok()) == "size %d, expected %d" % (len(SHARD) - 1, len(SHARD))
    assert not os.path.exists(o.staged)
    assert o.settle(b"\0" * len(SHARD), ok()) == "downloaded bytes do not match the Hub's id"
    assert not os.path.exists(o.staged) and o.hashed == [o.staged]
    # hashed while aria2 ran and untouched since: placed without a second hash
    sf.write(os.path.dirname(o.staged), os.path.basename(o.staged), SHARD)
    o.hashed.clear()
    early = _snapshot_staging.hash_staged(o.staged, o.item.remote)
    o.hashed.clear()
    assert o.settle(None, ok(), hashed=early) is None and o.hashed == []
    assert o.item.stat is not None and not os.path.exists(o.staged)


def test_a_file_touched_after_its_early_hash_is_hashed_again(tmp_path, monkeypatch):
    o = Outcomes(tmp_path, monkeypatch)
    sf.write(os.path.dirname(o.staged), os.path.basename(o.staged), SHARD)
    early = _snapshot_staging.hash_staged(o.staged, o.item.remote)
    o.hashed.clear()
    os.utime(o.staged, ns=(0, 10**9))
    _rounds.Round(o.transfer)._settle(o.item, ok(), early)  # pylint: disable=protected-access
    assert o.hashed == [o.staged] and o.item.stat is not None


class FakeHub(object):
    """_hub.resolve_file's answers per path, and whether each HEAD carried the token."""

    def __init__(self, answers):
        self.answers = answers
        self.heads = []

    def __call__(self, opener, endpoint, repo_id, commit, path, token=None, repo_type="model", timeout=60.0):
        self.heads.append((path, token))
        answer = self.answers[path]
        if callable(answer):
            answer = answer(token)
        if isinstance(answer, Exception):
            raise answer
        return answer


def hub_source(token="hf_tok", use_token=False):
    return _transfer.HubSource(endpoint="http://hub.invalid", repo_id="org/m", repo_type="model", commit="c" * 40,
                               token=token, use_token=use_token, timeout=5, opener=None)


def url(sha256=None, direct=False):
    return _hub.ResolvedURL("http://cdn.invalid/x" if not direct else "http://hub.invalid/x", direct, None, sha256,
                            None, None, None)


def test_hub_source_sends_the_token_only_once_refused(tmp_path, monkeypatch):
    items = fetch_items(tmp_path, ("a.safetensors", SHARD, True), ("config.json", CONFIG, False))
    gated = FakeHub({
        "a.safetensors": lambda token: url(hashlib.sha256(SHARD).hexdigest()) if token else _hub.HubHTTPError(401, "401 gated"),
        "config.json": lambda token: url(direct=True) if token else _hub.HubHTTPError(401, "401 gated"),
    })
    monkeypatch.setattr(_hub, "resolve_file", gated)
    source = hub_source()
    resolved = source.resolve(items)
    assert source.send_token and [res for dummy, res in resolved] == [
        _transfer.Resolution("http://cdn.invalid/x"), _transfer.Resolution("http://hub.invalid/x", direct=True)]
    assert sorted(gated.heads, key=repr) == [("a.safetensors", "hf_tok"), ("a.safetensors", None),
                                             ("config.json", "hf_tok"), ("config.json", None)]
    # without a token a direct URL is an ordinary one, for aria2
    monkeypatch.setattr(_hub, "resolve_file", FakeHub({"config.json": url(direct=True)}))
    assert hub_source(token=None).resolve(items[1:])[0][1].direct is False


def test_hub_source_errors(tmp_path, monkeypatch):
    items = fetch_items(tmp_path, ("a.safetensors", SHARD, True))
    cases = [
        (_hub.HubHTTPError(403, "403 no access"), "no access to this gated/private repo", True),
        (_hub.HubHTTPError(401, "401 gated"), "gated or private repo: set token", False),
        (_hub.HubHTTPError(404, "404 gone"), "is listed in org/m@", True),
        (url("0" * 64), "disagree on a.safetensors's sha256", True),
    ]
    for answer, words, use_token in cases:
        monkeypatch.setattr(_hub, "resolve_file", FakeHub({"a.safetensors": answer}))
        with pytest.raises(SnapshotError) as exc:
            hub_source(token="hf_tok" if use_token else None, use_token=use_token).resolve(items)
        assert words in exc.value.msg
    monkeypatch.setattr(_hub, "resolve_file", FakeHub({"a.safetensors": _hub.HubHTTPError(503, "503 busy", 7.0)}))
    assert hub_source().resolve(items)[0][1] == _transfer.Resolution(None, error="resolve: 503 busy", retry_after=7.0)
    monkeypatch.setattr(_hub, "resolve_file", FakeHub({"a.safetensors": OSError("connection refused")}))
    assert hub_source().resolve(items)[0][1].error == "resolve: connection refused"


def test_hub_source_download_errors(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise _hub.HubHTTPError(429, "429 slow down", 3.0)

    monkeypatch.setattr(_transfer_direct, "download_direct", refuse)
    with pytest.raises(_transfer.SourceError) as exc:
        hub_source().download("http://hub.invalid/x", str(tmp_path / "out"))
    assert exc.value.message == "GET: 429 slow down" and exc.value.retry_after == 3.0
    # http.client's own errors are no OSError: a retryable error of this file, not a traceback
    for error in (http.client.IncompleteRead(b"part", 10), http.client.BadStatusLine("garbage")):
        def cut(*args, error=error, **kwargs):
            raise error

        monkeypatch.setattr(_transfer_direct, "download_direct", cut)
        with pytest.raises(_transfer.SourceError) as exc:
            hub_source().download("http://hub.invalid/x", str(tmp_path / "out"))
        assert exc.value.message.startswith("GET: %s" % type(error).__name__)
    # the disk's errors are not retried as the endpoint's

    def full(*args, **kwargs):
        raise _transfer_direct.LocalWriteError(28, "No space left on device", str(tmp_path / "out"))

    monkeypatch.setattr(_transfer_direct, "download_direct", full)
    with pytest.raises(_transfer_direct.LocalWriteError):
        hub_source().download("http://hub.invalid/x", str(tmp_path / "out"))


def test_aria2_settings_tuning():
    aria2 = _aria2.Aria2Settings(aria2c="/usr/bin/aria2c", connections=4, splits=8, parallel_files=6,
                                 min_split_size="8M", timeout=60, retry_wait=2, validate_certs=False,
                                 ca_path="/ca.pem", proxy="http://user:pw@proxy.invalid:3128")
    tuning = aria2.tuning()
    assert tuning == {"connections": 4, "splits": 8, "parallel_files": 6, "min_split_size": "8M", "timeout": 60,
                      "retry_wait": 2, "validate_certs": False, "ca_path": "/ca.pem"}
    argv = _aria2.build_argv("/usr/bin/aria2c", "/in", "/log", **tuning)
    assert "--max-concurrent-downloads=6" in argv and not any("proxy" in a for a in argv)


class PeerThenHub(object):
    """A peers-like source: ``peers`` URLs in turn (aria2, each a peer), then the Hub's; a peer whose URI
    failed is dropped and, like _peers.PeerSource, ``settled`` says so (True: no try used)."""

    def __init__(self, peers):
        self.peers = list(peers)
        self.settles = []

    def resolve(self, items):
        if self.peers:
            return [(item, _transfer.Resolution("http://%s/%s" % (self.peers[0], item.remote.path),
                                                origin="peer:" + self.peers[0])) for item in items]
        return [(item, _transfer.Resolution("http://hub/" + item.remote.path)) for item in items]

    def settled(self, item, res, *, uri_errors, mismatch, failed=True):
        self.settles.append((res.origin, mismatch))
        if res.origin.startswith("peer:") and (res.url in uri_errors or mismatch):
            self.peers.remove(res.origin[5:])
            return True
        return False

    def pause(self):
        raise AssertionError("nothing waits here")


def fake_aria2(serve):
    """_aria2.run stand-in: ``serve(url)`` gives a URL's bytes, or None for a URI that fails (refused)."""
    def run(jobs, *dummy_args, **dummy_kwargs):
        outcomes, uri_errors = {}, {}
        for job in jobs:
            data = serve(job.url)
            if data is None:
                outcomes[job.key] = err(1)
                uri_errors[job.url] = (1, "Connection refused", None)
            else:
                sf.write(job.dir, job.out, data)
                outcomes[job.key] = ok()
        return _aria2.RunResult(0, "", outcomes, 0, "", uri_errors)
    return run


@pytest.mark.parametrize("fault", ["refused", "bad bytes"])
def test_rounds_failed_by_a_dropped_peer_use_no_try(tmp_path, monkeypatch, fault):
    """max_tries=1 and two peers that fail in turn: the Hub is still reached (review finding 4)."""
    dest = tmp_path / "d"
    items = fetch_items(dest, ("a.safetensors", SHARD, True))
    source = PeerThenHub(["gpu2", "gpu3"])
    if fault == "refused":
        monkeypatch.setattr(_aria2, "run", fake_aria2(lambda url: SHARD if url.startswith("http://hub/") else None))
    else:
        monkeypatch.setattr(_aria2, "run", fake_aria2(lambda url: SHARD if url.startswith("http://hub/") else b"\0" * len(SHARD)))
    logs = []
    transfer = transfer_for(dest, items, source, max_tries=1, logs=logs)
    assert transfer.run() == {}
    assert [s[0] for s in source.settles] == ["peer:gpu2", "peer:gpu3", "hub"]
    assert transfer.origins == {items[0].key: "hub"} and transfer.tries == {} and logs == []
    with open(items[0].final, "rb") as handle:
        assert handle.read() == SHARD


def test_a_failure_no_peer_is_blamed_for_still_uses_a_try(tmp_path, monkeypatch):
    dest = tmp_path / "d"
    items = fetch_items(dest, ("a.safetensors", SHARD, True))
    source = PeerThenHub([])
    monkeypatch.setattr(_aria2, "run", fake_aria2(lambda url: None))
    failed = transfer_for(dest, items, source, max_tries=2).run()
    assert list(failed) == ["a.safetensors"] and len(source.settles) == 2


def resuming_aria2(serve):
    """_aria2.run stand-in that resumes like aria2 --continue: with a .aria2 control file beside the
    staging file it appends the rest of the URL's bytes to what is there. ``serve(url)`` gives (bytes,
    dies): a URI that dies writes half its bytes, leaves the control file and fails as refused."""
    def run(jobs, *dummy_args, **dummy_kwargs):
        outcomes, uri_errors = {}, {}
        for job in jobs:
            path = os.path.join(job.dir, job.out)
            data, dies = serve(job.url)
            have = os.path.getsize(path) if os.path.exists(path + ".aria2") else 0
            if dies:
                with open(path, "ab" if have else "wb") as handle:
                    handle.write(data[have:len(data) // 2])
                open(path + ".aria2", "w").close()
                outcomes[job.key] = err(1)
                uri_errors[job.url] = (1, "Failed to establish connection, cause: Connection refused", None)
                continue
            with open(path, "ab" if have else "wb") as handle:
                handle.write(data[have:])
            if os.path.exists(path + ".aria2"):
                os.unlink(path + ".aria2")
            outcomes[job.key] = ok()
        return _aria2.RunResult(0, "", outcomes, 0, "", uri_errors)
    return run


def test_the_next_source_never_resumes_a_dropped_peers_partial(tmp_path, monkeypatch):
    """Issue 20 item 7, without a network: gpu2 serves wrong bytes and dies mid-file; the Hub then
    resumed its partial (aria2 --continue), failed the hash and used the only try."""
    dest = tmp_path / "d"
    items = fetch_items(dest, ("a.safetensors", SHARD, True))
    source = PeerThenHub(["gpu2"])
    monkeypatch.setattr(_aria2, "run", resuming_aria2(
        lambda url: (SHARD, False) if url.startswith("http://hub/") else (b"\0" * len(SHARD), True)))
    logs = []
    transfer = transfer_for(dest, items, source, max_tries=1, logs=logs)
    assert transfer.run() == {}
    assert [s[0] for s in source.settles] == ["peer:gpu2", "hub"] and transfer.tries == {}
    assert any("discarded the partial bytes" in line for line in logs)
    with open(items[0].final, "rb") as handle:
        assert handle.read() == SHARD
