# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_failure: a failure hands its module exactly the keyword arguments of fail_json."""
from __future__ import annotations

from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure


def test_fail_kwargs_are_msg_and_the_fields():
    exc = ModuleFailure("GPU 0 is short by 3.0 GiB", gpus=[], gpu_count=0)
    assert str(exc) == exc.msg == "GPU 0 is short by 3.0 GiB"
    assert exc.fail_kwargs() == {"msg": "GPU 0 is short by 3.0 GiB", "gpus": [], "gpu_count": 0}
    assert ModuleFailure("bad").fail_kwargs() == {"msg": "bad"}


def test_fail_kwargs_is_a_copy():
    exc = ModuleFailure("x", changed=False)
    exc.fail_kwargs()["changed"] = True
    assert exc.fields == {"changed": False}
