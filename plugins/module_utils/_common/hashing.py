# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sha256 (and git blob ids) of many files in parallel.

Private to the collection: not a public API, may change without notice.

hashlib releases the GIL while it digests a buffer larger than 2 KiB, so threads give real
parallelism; large reads into one reused buffer keep the per-call overhead out of the figure.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor

BLOCK = 8 * 1024 * 1024


def default_workers():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def sha256_file(path, block=BLOCK, progress=None):
    """Hex sha256 of ``path``; ``progress(nbytes)`` is called after every block read."""
    digest = hashlib.sha256()
    buf = bytearray(block)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as handle:
        while True:
            n = handle.readinto(buf)
            if not n:
                break
            digest.update(view[:n])
            if progress is not None:
                progress(n)
    return digest.hexdigest()


def git_blob_sha1(path):
    """The git object id of the file's bytes (what the Hub reports as a non-LFS file's id)."""
    size = os.path.getsize(path)
    digest = hashlib.sha1(b"blob %d\x00" % size)  # nosec B324 - git's object id, not security
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(BLOCK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_files(paths, workers=None, block=BLOCK, progress=None):
    """{path: hex sha256 or OSError} for every path, hashed by ``workers`` threads.

    Largest files first, so one big file does not start last and leave the other threads idle.
    An unreadable file yields its OSError instead of aborting the others.
    """
    workers = workers or default_workers()
    order = []
    for path in paths:
        try:
            order.append((os.path.getsize(path), path))
        except OSError:
            order.append((0, path))
    order.sort(reverse=True)

    def one(path):
        try:
            return path, sha256_file(path, block=block, progress=progress)
        except OSError as exc:
            return path, exc

    if workers == 1 or len(order) <= 1:
        return dict(one(path) for _size, path in order)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(pool.map(one, [path for _size, path in order]))
