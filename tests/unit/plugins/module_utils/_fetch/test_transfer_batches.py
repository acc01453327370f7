# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Signed URLs resolved batch by batch (never the whole queue up front), their expiry (X-Amz-* too),
and files a token-holding endpoint serves itself kept away from aria2 (which follows redirects with
its headers)."""
from __future__ import annotations

import hashlib


from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import rounds as _rounds
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import snapshot_files as sf

TARGET = "gpufleet-lab/Kimi-K2.6-mini"
GATED = "gpufleet-lab/Kimi-K2.6-mini-gated"
TOKEN_READER = "hf_labREADERfakeTOKENnotAsecret000001"  # tests/lab/fixtures.py, lab-only, fake
SHARDS = ["model-00001-of-000004.safetensors", "model-00002-of-000004.safetensors",
          "model-00003-of-000004.safetensors"]


def run(hub, dest, **params):
    base = dict(repo_id=TARGET, revision="main", dest=str(dest), endpoint=hub.api, min_free_bytes=0,
                retry_wait=1, connections=1, splits=1, min_split_size="1M")
    base.update(params)
    return _snapshot.snapshot(base)


def sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


# ----------------------------------------------------------------------------- no Hub needed

def test_signed_url_expiry_forms():
    assert _hub.signed_url_expiry("http://cdn/x?exp=1700000000&sig=ab") == 1700000000
    assert _hub.signed_url_expiry("https://cdn/x?Expires=1700000000&Signature=s&Key-Pair-Id=k") == 1700000000
    # SigV4 presigned: signed at X-Amz-Date, valid X-Amz-Expires seconds
    url = ("https://bucket.s3.amazonaws.com/blob?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=a%2F20240102"
           "&X-Amz-Date=20240102T030405Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=f")
    assert _hub.signed_url_expiry(url) == 1704164645 + 3600
    assert _hub.signed_url_expiry(url.replace("X-Amz-", "x-amz-")) == 1704164645 + 3600
    assert _hub.signed_url_expiry("https://b/x?X-Amz-Date=garbage&X-Amz-Expires=60") is None
    assert _hub.signed_url_expiry("https://b/x?X-Amz-Date=20240102T030405Z") is None
    assert _hub.signed_url_expiry("https://b/x?X-Amz-Date=20240102T030405Z&X-Amz-Expires=-5") is None
    assert _hub.signed_url_expiry("https://b/x") is None


def _items(tmp_path, sizes):
    items = []
    for index, size in enumerate(sizes):
        item = sf.item_for(tmp_path, "f%d" % index, b"x" * 8, False)
        item.remote = item.remote._replace(size=size)
        items.append(item)
    return items


def test_batches_hold_parallel_files_large_files_and_small_ones_ride_along(tmp_path):
    big = _rounds.SMALL_FILE + 1
    items = _items(tmp_path, [10, big, big, 10, big, 10, big, big])
    cut = _rounds.batches(items, 2)
    assert [[items.index(i) for i in batch] for batch in cut] == [[0, 1, 2, 3], [4, 5, 6], [7]]
    assert _rounds.batches(items, 0) == _rounds.batches(items, 1)
    assert len(_rounds.batches(_items(tmp_path, [10, 10, 10]), 1)) == 1
    assert _rounds.batches([], 4) == []


# ----------------------------------------------------------------------------- lab Hub + aria2c

def test_later_batches_resolve_when_they_start_so_no_url_expires(lab_hub, aria2c, tmp_path, monkeypatch):
    """3 shards of 5.4-6.2 MiB, one at a time, and signed URLs that expire once the CDN was asked for one
    other blob after they were signed (the lab's cdn_url_blobs: an expiry driven by the downloads' order,
    not by the clock, so a loaded machine cannot make it pass or fail): resolved up front, the 2nd and 3rd
    shards' URLs would be dead when aria2 reached them (403, a lost round); resolved per batch, each is
    signed after the shard before it was asked for, and is used before any other."""
    monkeypatch.setattr(_rounds, "SMALL_FILE", 1 << 20)  # the lab's shards are ~6 MB
    lab_hub.config(cdn_url_blobs=1)
    res = run(lab_hub, tmp_path / "d", allow_patterns=SHARDS, parallel_files=1, max_tries=3)
    dummy, files = lab_hub.files_at(TARGET, "main")
    for path in SHARDS:
        assert sha256(tmp_path / "d" / path) == files[path]["lfs"]["sha256"]
    assert res["changed"]
    log = lab_hub.log()
    assert not [e for e in log if e["status"] in (403, 410)], "a signed URL expired before aria2 used it"
    # each shard's resolve (HEAD) comes after the previous shard's bytes were served
    heads = {e["path"].rsplit("/", 1)[1]: e["seq"] for e in log if e["method"] == "HEAD" and "/resolve/" in e["path"]}
    gets = [e["seq"] for e in log if e["server"] == "cdn" and e["method"] == "GET"]
    assert len(gets) == len(SHARDS)
    assert heads[SHARDS[1]] > gets[0] and heads[SHARDS[2]] > gets[1], (heads, gets)


def test_direct_files_of_a_gated_repo_never_go_to_aria2(lab_hub, aria2c, tmp_path):
    """The endpoint serves a gated repo's small files itself, to the token. They are fetched without
    following redirects: aria2 would resend an Authorization header to wherever a redirect of its GET
    points (it has no switch to refuse redirects), so a token-bearing GET never comes from aria2."""
    res = run(lab_hub, tmp_path / "g", repo_id=GATED, token=TOKEN_READER,
              allow_patterns=["*.json", "*.py", "tiktoken.model", "model-00001-*"])
    assert TOKEN_READER not in repr(res)
    log = lab_hub.log()
    direct_gets = [e for e in log if e["server"] == "api" and e["method"] == "GET" and "/resolve/" in e["path"]]
    assert direct_gets and all(e["auth_present"] for e in direct_gets)
    assert not any("aria2" in (e.get("user_agent") or "") for e in log if e["auth_present"]), log
    assert any("aria2" in (e.get("user_agent") or "") for e in log if e["server"] == "cdn"), "the shard went by aria2"
    assert not any(e["auth_present"] for e in log if e["server"] == "cdn")
    dummy, files = lab_hub.files_at(GATED, "main")
    assert sorted(f["path"] for f in res["files"]) == sorted(
        p for p in files if p.endswith((".json", ".py")) or p in ("tiktoken.model",) or p.startswith("model-00001-"))
