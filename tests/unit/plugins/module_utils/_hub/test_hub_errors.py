# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_hub/errors.py without a Hub: the backoff and SnapshotError's payload (hf_snapshot's failure, which
the Hub's listing and resolve raise too)."""
from __future__ import annotations

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import errors as _fetch_errors
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import errors as _snapshot_errors


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


def test_hf_snapshot_and_the_hub_raise_one_failure_class():
    """hf_snapshot catches SnapshotError: what _hub raises (an unsafe redirect, a listing failure) is one."""
    assert _fetch_errors.SnapshotError is _snapshot_errors.SnapshotError
    assert _fetch_errors.backoff is _snapshot_errors.backoff
    assert issubclass(_hub.UnsafeRedirectError, _fetch_errors.SnapshotError)
    assert issubclass(_hub.UnsafeRedirectError, _hub.UntrustedAnswerError)
