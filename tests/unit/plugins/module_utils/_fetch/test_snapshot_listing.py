# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_snapshot_listing and _snapshot_errors without a Hub: patterns, backoff, failure payloads."""
from __future__ import annotations

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import errors as _snapshot_errors
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import listing as _snapshot_listing


def test_patterns_semantics():
    assert _snapshot_listing.matches_patterns("a/b.json", ["*.json"], None)
    assert not _snapshot_listing.matches_patterns("a.bin", ["*.json"], None)
    assert not _snapshot_listing.matches_patterns("sub/x.bin", None, ["sub/"])
    assert _snapshot_listing.matches_patterns("x", None, None)
    assert _snapshot_listing.matches_patterns("a.json", "*.json", None)  # a single pattern as a string


def test_backoff_doubles_up_to_its_cap():
    assert [_snapshot_errors.backoff(2, n) for n in (1, 2, 3)] == [2, 4, 8]
    assert _snapshot_errors.backoff(2, 20) == _snapshot_errors.MAX_BACKOFF


def test_fail_kwargs_carry_the_payload_and_mask_the_token():
    token = "hf_secretTOKEN"
    result = {"commit": "c" * 40, "files": [{"path": "a", "size": 1, "action": "failed"}], "bytes_fetched": 0,
              "stray": [], "duration": 1.0, "timings": {}}
    exc = _snapshot_errors.SnapshotError("1 file(s) failed: a: GET: 401 bad token %s" % token,
                                         failed={"a": "GET: 401 bad token %s" % token}, disk={"free_bytes": 1},
                                         result=result, status=401)
    exc.mask(token)
    kwargs = exc.fail_kwargs()
    assert set(kwargs) == {"msg", "failed", "disk", "commit", "files", "bytes_fetched", "stray"}
    assert token not in repr(kwargs) and "********" in kwargs["msg"] and str(exc) == kwargs["msg"]
    assert kwargs["failed"] == {"a": "GET: 401 bad token ********"} and kwargs["commit"] == "c" * 40
    assert _snapshot_errors.SnapshotError("plain").fail_kwargs() == {"msg": "plain"}
