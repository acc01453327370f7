# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the real SGLang 0.5.23 is on this controller.

ansible-test's units venv cannot import SGLang (2.3 GB of CPU torch and friends), and does not need
to: the checker runs as a subprocess of an interpreter that has it, as it does on a host. The lab
builds one, verified, under ``$GPUFLEET_LAB_CACHE/venvs/sglang-<hash>/`` (tests/lab/wheelhouse.py,
tests/lab/tests/test_wheelhouse.py). ansible-test passes few environment variables on, so the cache
is also looked for at its default place and above the collection copy (``$CACHE/build*/...``).
"""
from __future__ import annotations

import glob
import os
import subprocess

import pytest

SGLANG_VERSION = "0.5.23"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))  # the collection root


def _caches():
    seen = []
    for cand in (os.environ.get("GPUFLEET_LAB_CACHE"), os.path.expanduser("~/.cache/gpufleet-lab"),
                 os.path.abspath(os.path.join(ROOT, "..", "..", "..", ".."))):
        if cand and cand not in seen:
            seen.append(cand)
    return seen


def find_python():
    """The first lab venv python whose sglang imports with version SGLANG_VERSION, else None."""
    for cache in _caches():
        for python in sorted(glob.glob(os.path.join(cache, "venvs", "sglang-*", "bin", "python"))):
            try:
                out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120, check=False)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if out.stdout.decode().strip() == SGLANG_VERSION:
                return python
    return None


@pytest.fixture(scope="session")
def sglang_python():
    python = find_python()
    if python is None:
        pytest.skip("no lab venv with sglang==%s under %s/venvs/sglang-*/ (outside the gpufleet lab: build it with "
                    "`tests/stages.sh setup` and tests/lab/tests/test_wheelhouse.py)" % (SGLANG_VERSION, " or ".join(_caches())))
    return python
