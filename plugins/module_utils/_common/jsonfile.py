# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one reader for JSON files of a model tree (config.json, the weights index): safe on hostile input.

Private to the collection: not a public API, may change without notice.

A model tree comes from a server the collection does not control, so a JSON file in it may be a
FIFO (``open`` would wait for a writer for ever), a symlink to ``/dev/zero`` (an unbounded read), a
multi-gigabyte file, or nest arrays so deep that parsing (or anything that walks the result later,
such as Ansible serialising the module result) hits Python's recursion limit. Each of those is one
``JsonFileError`` whose text says what is wrong; the caller names the file and the fix.

Symlinks are followed (the huggingface_hub cache layout links every file into ``blobs/``): what
must hold is that the file they lead to is a regular file.
"""

from __future__ import annotations

import json
import os
import stat

# The largest JSON file of a model tree is its weights index. One entry is ~60-100 bytes
# ("tensor name": "model-000NN-of-000MM.safetensors"), so even an index of ~200,000 tensors (the size
# class of Kimi K2 / DeepSeek V3 with their per-expert weights and scales) is ~10-20 MB. 64 MiB leaves
# more than 3x headroom while keeping a hostile file from filling the host's memory.
MAX_BYTES = 64 * 1024 * 1024
# Real configs nest 4-6 levels (quantization_config.config_groups.group_0.weights...); an index 3.
# 64 is generous, and far below the depth at which json, jmespath or Ansible's result handling recurse
# out of stack.
MAX_DEPTH = 64
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


class JsonFileError(ValueError):
    """A JSON file that cannot be used; str() says why (without the file name)."""

    def __init__(self, reason: str, *, missing: bool = False) -> None:
        super().__init__(reason)
        self.missing = missing


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _read_capped(path: str, max_bytes: int) -> bytes:
    """The bytes of ``path`` when it is a regular file of at most ``max_bytes``; JsonFileError otherwise."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        missing = not os.path.lexists(path)
        raise JsonFileError("is missing" if missing else "is a dangling symlink (to %s)" % os.readlink(path),
                            missing=missing)
    except OSError as exc:
        raise JsonFileError("cannot be read (%s)" % (exc.strerror or exc))
    if not stat.S_ISREG(st.st_mode):
        raise JsonFileError("is %s, not a regular file" % _kind(st.st_mode))
    try:
        # O_NONBLOCK: if the path was swapped for a FIFO since the stat, open must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise JsonFileError("cannot be read (%s)" % (exc.strerror or exc))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise JsonFileError("is %s, not a regular file" % _kind(st.st_mode))
        if st.st_size > max_bytes:
            raise JsonFileError("is %d bytes, more than the %d MiB a model's JSON file can plausibly need (a "
                                "corrupt or hostile file)" % (st.st_size, max_bytes // (1024 * 1024)))
        chunks = []
        left = max_bytes + 1  # one byte past the cap tells a file that grew while being read
        while left > 0:
            chunk = os.read(fd, min(left, 1024 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise JsonFileError("cannot be read (%s)" % (exc.strerror or exc))
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > max_bytes:
        raise JsonFileError("grew past %d MiB while being read" % (max_bytes // (1024 * 1024)))
    return raw


def _too_deep(data: object, max_depth: int) -> bool:
    """Whether ``data`` nests more than ``max_depth`` levels; iterative, so it cannot recurse out of stack."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def parse_json(raw: bytes, *, max_depth: int = MAX_DEPTH, invalid: str = "is not valid JSON") -> object:
    """``raw`` (UTF-8 JSON text, e.g. a safetensors header) parsed; JsonFileError when it cannot be.

    ``invalid`` starts the reason when the text does not parse (the caller's established wording).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonFileError("is not UTF-8 (bad byte at offset %d)" % exc.start)
    try:
        data = json.loads(text)
    except RecursionError:
        raise JsonFileError("nests deeper than %d levels (corrupt or hostile)" % max_depth)
    except ValueError as exc:
        raise JsonFileError("%s (%s)" % (invalid, exc))
    if _too_deep(data, max_depth):
        raise JsonFileError("nests deeper than %d levels (corrupt or hostile)" % max_depth)
    return data


def read_json_file(path: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> object:
    """The parsed JSON value of ``path``; JsonFileError (``missing`` set when absent) when it cannot be used."""
    return parse_json(_read_capped(path, max_bytes), max_depth=max_depth)
