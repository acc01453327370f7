# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run a module's main() in-process as the controller would: arguments in through ansible-core's
``patch_module_args`` (2.19; older cores: the ``_ANSIBLE_ARGS`` patch it replaces), the JSON
result read back from stdout, with the exit code as ``_rc``."""
from __future__ import annotations

import contextlib
import json

import pytest

from ansible.module_utils import basic
from ansible.module_utils.common import warnings as _module_warnings

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core < 2.19
    import contextlib
    from unittest import mock

    from ansible.module_utils.common.text.converters import to_bytes

    @contextlib.contextmanager
    def patch_module_args(args):
        with mock.patch.object(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args}))):
            yield


@contextlib.contextmanager
def _as_a_module_process():
    """Run as a module's own process does: no warnings or deprecations from before, and warnings kept
    for the result rather than shown on the controller. ansible-core keeps both in module-level state
    (2.19: ``_internal.is_controller``, which any test that loads controller code, such as a filter,
    turns on for the rest of the process), so in one pytest process an earlier test would decide what
    this run reports. ansible-test units forks per test; plain pytest (the fast lane) does not."""
    for name in ("_global_warnings", "_global_deprecations"):
        store = getattr(_module_warnings, name, None)
        if hasattr(store, "clear"):
            store.clear()
    internal = getattr(_module_warnings, "_internal", None)
    if internal is None or not hasattr(internal, "is_controller"):
        yield
        return
    was = internal.is_controller
    internal.is_controller = False
    try:
        yield
    finally:
        internal.is_controller = was


def run_module(main, capsys, args, check_mode=False, forbidden=None):
    """Result dict of ``main()`` with ``args``; ``forbidden``: a string that must not be printed."""
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with _as_a_module_process(), patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            main()
    out = capsys.readouterr().out
    if forbidden is not None:
        assert forbidden not in out
    result = json.loads(out)
    result["_rc"] = exc.value.code
    return result
