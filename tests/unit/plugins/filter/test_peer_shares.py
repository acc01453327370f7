# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.llm.peer_shares (issue 12 item 2): every path to exactly one host with Hub access, by
bytes, largest first to the lightest host, the same plan on every run."""
from __future__ import annotations

import random

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.llm.plugins.filter.peer_shares import FilterModule, peer_shares


def _row(path, size):
    return {"path": path, "size": size, "sha256": None, "blob_id": "0" * 40}


# The Kimi-K2.6-mini fixture's listing (the lab's Kimi-shaped repo), in the Hub's order.
KIMI = [
    _row(".gitattributes", 436), _row("README.md", 210), _row("config.json", 3282),
    _row("model-00001-of-000004.safetensors", 6512392), _row("model-00002-of-000004.safetensors", 5706688),
    _row("model-00003-of-000004.safetensors", 5706688), _row("model-00004-of-000004.safetensors", 6231424),
    _row("model.safetensors.index.json", 1055853), _row("tiktoken.model", 2268),
]


def _loads(shares, listing):
    size = {r["path"]: r["size"] for r in listing}
    return {h: sum(size[p] for p in paths) for h, paths in shares.items()}


def test_every_path_to_exactly_one_host():
    shares = peer_shares(KIMI, ["gpu1", "gpu2", "gpu3", "gpu4"])
    assigned = [p for paths in shares.values() for p in paths]
    assert sorted(assigned) == sorted(r["path"] for r in KIMI)
    assert set(shares) == {"gpu1", "gpu2", "gpu3", "gpu4"}
    assert FilterModule().filters()["peer_shares"] is peer_shares


def test_largest_first_to_the_lightest_host():
    shares = peer_shares(KIMI, ["gpu1", "gpu2", "gpu3", "gpu4"])
    # the four shards spread one per host (largest to gpu1, ties between equal shards in path order)
    assert shares["gpu1"][0] == "model-00001-of-000004.safetensors"
    assert shares["gpu2"][0] == "model-00004-of-000004.safetensors"
    assert shares["gpu3"][0] == "model-00002-of-000004.safetensors"
    assert shares["gpu4"][0] == "model-00003-of-000004.safetensors"
    # then the index goes to the lightest host so far (gpu3, the first of the two 5706688-byte hosts)
    assert shares["gpu3"][1] == "model.safetensors.index.json"
    loads = _loads(shares, KIMI)
    assert max(loads.values()) - min(loads.values()) <= max(r["size"] for r in KIMI)


def test_balanced_by_bytes_not_by_count():
    listing = [_row("big", 1000)] + [_row("small-%02d" % i, 10) for i in range(50)]
    shares = peer_shares(listing, ["a", "b"])
    assert shares["a"] == ["big"]
    assert len(shares["b"]) == 50


def test_deterministic_whatever_the_input_order():
    hosts = ["gpu3", "gpu1", "gpu4", "gpu2"]
    want = peer_shares(KIMI, hosts)
    rng = random.Random(12)
    for _attempt in range(20):
        listing = list(KIMI)
        rng.shuffle(listing)
        order = list(hosts)
        rng.shuffle(order)
        assert peer_shares(listing, order) == want


def test_ties_go_to_the_host_name_first_in_order():
    shares = peer_shares([_row("x", 5), _row("y", 5)], ["b", "a"])
    assert shares == {"b": ["y"], "a": ["x"]}


def test_one_host_gets_everything_and_an_empty_listing_gives_empty_shares():
    assert peer_shares(KIMI, ["gpu1"]) == {"gpu1": [r["path"] for r in sorted(KIMI, key=lambda r: (-r["size"], r["path"]))]}
    assert peer_shares([], ["gpu1", "gpu2"]) == {"gpu1": [], "gpu2": []}
    assert peer_shares([], []) == {}


def test_more_hosts_than_files():
    shares = peer_shares([_row("a", 3), _row("b", 2)], ["h1", "h2", "h3"])
    assert shares == {"h1": ["a"], "h2": ["b"], "h3": []}


@pytest.mark.parametrize("listing, hosts, message", [
    (KIMI, [], "no host has Hub access to fetch 9 files; set model_peer_hub_access true"),
    (KIMI, "gpu1", "hosts must be a list of host names"),
    (KIMI, ["gpu1", "gpu1"], "hosts lists gpu1 more than once"),
    (KIMI, ["gpu1", ""], "hosts holds an empty name"),
    ({"files": KIMI}, ["gpu1"], "the input must be a listing"),
    ([{"size": 3}], ["gpu1"], "listing entry 0 has no path"),
    ([{"path": "a"}], ["gpu1"], "listing entry a has size None"),
    ([{"path": "a", "size": -1}], ["gpu1"], "listing entry a has size -1"),
    ([{"path": "a", "size": "12"}], ["gpu1"], "listing entry a has size '12'"),
    ([{"path": "a", "size": True}], ["gpu1"], "listing entry a has size True"),
    ([_row("a", 1), _row("a", 1)], ["gpu1"], "listing holds a twice"),
])
def test_bad_input_is_refused_with_the_fix(listing, hosts, message):
    with pytest.raises(AnsibleFilterError, match=message):
        peer_shares(listing, hosts)
