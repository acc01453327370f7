# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import hashlib
import subprocess

from ansible_collections.gpufleet.llm.plugins.module_utils._common import hashing as h


def test_parallel_sha256_matches_hashlib_and_reports_unreadable(tmp_path):
    blobs = {}
    for i, size in enumerate((0, 1, h.BLOCK - 1, h.BLOCK, h.BLOCK * 2 + 17)):
        data = bytes((i * 7 + j) % 251 for j in range(min(size, 4096))) * (size // 4096 + 1)
        data = data[:size]
        path = tmp_path / ("f%d" % i)
        path.write_bytes(data)
        blobs[str(path)] = hashlib.sha256(data).hexdigest()
    missing = str(tmp_path / "missing")
    seen = []
    got = h.sha256_files(list(blobs) + [missing], workers=3, progress=seen.append)
    assert {k: v for k, v in got.items() if k != missing} == blobs
    assert isinstance(got[missing], OSError)
    assert sum(seen) == sum((tmp_path / p).stat().st_size for p in blobs)


def test_git_blob_sha1_matches_git(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b'{"model_type": "kimi_k25"}\n')
    expected = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True).stdout.strip()
    assert h.git_blob_sha1(str(path)) == expected
