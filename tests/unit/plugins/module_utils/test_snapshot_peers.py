# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hf_snapshot's listing hand-over and peer fetching (issue 12 item 2), against the real lab Hub with
real aria2c; peers are small Range-capable servers on loopback (peer_server.py; the fleet
integration target tests the real nginx of peer_serve). Faults are driven by bytes and events."""
from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils import _snapshot

TARGET = "gpufleet-lab/Kimi-K2.6-mini"


def run(lab, dest, **params):
    base = dict(repo_id=TARGET, revision="main", dest=str(dest), endpoint=lab.api, min_free_bytes=0,
                retry_wait=0, connections=4, splits=4, min_split_size="1M")
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


def test_listing_replaces_the_hub_listing(lab_hub, aria2c, tmp_path):
    res = listed(lab_hub, tmp_path, allow_patterns=["*.json"])
    listing = [{k: row[k] for k in ("path", "size", "sha256", "blob_id")} for row in res["files"]]
    lab_hub.reset()
    dest = tmp_path / "d"
    got = run(lab_hub, dest, revision=res["commit"], listing=listing)
    assert got["changed"] and sorted(r["path"] for r in got["files"]) == sorted(r["path"] for r in listing)
    # the Hub was never asked for a listing: only the files
    assert not [e for e in lab_hub.log(server="api") if e["path"].startswith("/api/")]
    assert all(os.path.isfile(dest / r["path"]) for r in listing)


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
