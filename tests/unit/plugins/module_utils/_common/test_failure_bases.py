# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One failure base: hf_snapshot's and model_verify's errors are ModuleFailures, each with its payload."""
from __future__ import annotations

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._verify import verify as _verify
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError


@pytest.mark.parametrize("error", [
    SnapshotError("no space", disk={"free_bytes": 1}),
    _verify.VerifyError("bad"),
    _verify.ParamError("mode must be one of quick, full, auto"),
    _verify.MissingLibrary("jmespath", "Traceback: no jmespath"),
])
def test_every_failure_is_a_module_failure(error):
    with pytest.raises(ModuleFailure) as caught:
        raise error
    assert caught.value is error
    assert str(error) == error.msg == error.fail_kwargs()["msg"]


def test_snapshot_error_details_are_its_fields():
    exc = SnapshotError("refusing", unsafe=["../x"], status=403, disk={"free_bytes": 1})
    assert exc.details is exc.fields
    assert exc.details == {"unsafe": ["../x"], "status": 403, "disk": {"free_bytes": 1}}
    # only what the operator needs goes to fail_json, unlike ModuleFailure's every field
    assert exc.fail_kwargs() == {"msg": "refusing", "disk": {"free_bytes": 1}}


def test_snapshot_error_mask_reaches_its_fields():
    exc = SnapshotError("GET hf_tok failed", failed={"a": "401 hf_tok"})
    exc.mask("hf_tok")
    assert exc.fields["failed"] == {"a": "401 ********"} and exc.msg == str(exc) == "GET ******** failed"
    assert exc.args == (exc.msg,)


def test_verify_errors_keep_their_attributes_and_payload():
    assert issubclass(_verify.ParamError, ValueError)
    missing = _verify.MissingLibrary("jmespath", None)
    assert missing.library == "jmespath" and missing.import_traceback is None
    assert missing.fail_kwargs() == {"msg": str(missing), "exception": None}
    assert _verify.VerifyError("bad").fail_kwargs() == {"msg": "bad"}
