# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's one atomic write: readers see the old file or the new one, never a mix.

Private to the collection: not a public API, may change without notice. Standard library only.

Every file the collection replaces while something may read it (the manifest and the stat cache,
progress and peer status, SGLang's config and its previous copy, the peer server's nginx config, a
killed job's result, the benchmark report) goes through ``atomic_write``:

1. a temp file with a unique name (``.<name>.<random>``) in the target's own directory (a rename
   across filesystems is not atomic);
2. its final mode (and owner) set on the open descriptor before a byte is written, so a secret
   is never readable by anyone the final file would not allow, not even for an instant;
3. the bytes written and fsynced;
4. ``check(temp path)`` when given (``nginx -t`` on the new config): if it raises, the target is
   untouched;
5. renamed over the target, then the directory fsynced so the rename itself survives a crash.

Whatever fails, the temp file is removed and the target is as it was.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable


def atomic_write(path: str, data: bytes | str, mode: int, *, uid: int = -1, gid: int = -1,
                 check: Callable[[str], None] | None = None) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8), ``mode`` and owner ``uid``/``gid``
    (-1: the writer's), atomically. ``check``: called with the temp file's path before the rename."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        try:
            os.fchmod(fd, mode)
            if uid != -1 or gid != -1:
                os.fchown(fd, uid, gid)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if check is not None:
            check(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(directory)


def atomic_write_json(path: str, data: Any, mode: int = 0o644) -> None:
    """``data`` as indented, key-sorted JSON with a final newline, through ``atomic_write``."""
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n", mode)


def fsync_dir(directory: str) -> None:
    """Make the entries of ``directory`` (a rename into it) durable."""
    dir_fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
