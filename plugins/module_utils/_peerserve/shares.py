# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Who fetches which file of a listing from the Hub (gpufleet.llm.peer_shares, model_distribution=peers):
largest files first, each to the host with the fewest bytes so far, deterministic.

Private to the collection: not a public API, may change without notice. Standard library only.
"""
from __future__ import annotations


class SharesError(ValueError):
    """Input the plan cannot be made from; the message is the filter's error, word for word."""


def _check_hosts(hosts: object) -> list[str]:
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple)):
        raise SharesError("peer_shares: hosts must be a list of host names, got %s" % type(hosts).__name__)
    names = [str(h) for h in hosts]
    if any(not n for n in names):
        raise SharesError("peer_shares: hosts holds an empty name; give inventory host names")
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise SharesError("peer_shares: hosts lists %s more than once; give each host once" % ", ".join(dups))
    return names


def _check_listing(listing: object) -> list[tuple[str, int]]:
    if isinstance(listing, (str, bytes, dict)) or not isinstance(listing, (list, tuple)):
        raise SharesError("peer_shares: the input must be a listing (a list of {path, size}), got %s"
                          % type(listing).__name__)
    rows: list[tuple[str, int]] = []
    seen: set[str] = set()
    for index, row in enumerate(listing):
        path = row.get("path") if isinstance(row, dict) else None
        if not isinstance(path, str) or not path:
            raise SharesError("peer_shares: listing entry %d has no path; pass hf_snapshot's resolve_only `files`" % index)
        size = row.get("size")
        # bool is an int subclass: a True size is a template mistake, not one byte
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise SharesError("peer_shares: listing entry %s has size %r; every entry needs its size in bytes (an integer >= 0)"
                              % (path, size))
        if path in seen:
            raise SharesError("peer_shares: listing holds %s twice; each path must appear once" % path)
        seen.add(path)
        rows.append((path, size))
    return rows


def peer_shares(listing: object, hosts: object) -> dict[str, list[str]]:
    names = _check_hosts(hosts)
    rows = _check_listing(listing)
    shares: dict[str, list[str]] = {n: [] for n in names}
    if not rows:
        return shares
    if not names:
        raise SharesError("peer_shares: no host has Hub access to fetch %d files; set model_peer_hub_access "
                          "true on at least one host" % len(rows))
    loads = {n: 0 for n in names}
    # Largest first, each to the lightest host (greedy LPT): within 4/3 of the best split, and a big
    # shard never lands last on an already loaded host.
    for path, size in sorted(rows, key=lambda r: (-r[1], r[0])):
        host = min(names, key=lambda n: (loads[n], n))
        shares[host].append(path)
        loads[host] += size
    return shares
