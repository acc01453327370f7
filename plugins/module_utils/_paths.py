# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a remote (Hub) path may land inside a local destination.

Private to the collection: not a public API, may change without notice.

A repository listing comes from a server: a hostile or broken one can name ``../../etc/cron.d/x``
or a path that walks through a symlink already inside the destination. Every path the collection
writes goes through :func:`dest_path` first.
"""

from __future__ import annotations

import os
import posixpath


# The file names of a safetensors model's weights (an index and its shards, or one file). Here, in a
# standard-library-only file, so that gpu_info (which reads the index's total_size) imports neither
# safetensors nor numpy.
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


# The longest file name Linux filesystems take (ext4, xfs): a longer one could only fail later, with OSError.
NAME_MAX = 255


class UnsafePathError(ValueError):
    """A remote path that would land outside the destination directory."""


def check_relative(remote_path: str) -> list[str]:
    """The components of ``remote_path``, once it is a plain relative path; UnsafePathError if not.

    Refuses an empty or non-string path, NUL, backslash, an absolute path and ``..``/``.``/empty
    components. Checked where a listing enters (``_hub.list_revision``) and again by :func:`dest_path`.
    """
    if not isinstance(remote_path, str) or not remote_path:
        raise UnsafePathError("empty remote path")
    if "\x00" in remote_path:
        raise UnsafePathError("remote path %r contains a NUL byte" % remote_path)
    if "\\" in remote_path:
        # A backslash is a separator on the Hub's Windows clients; refuse rather than guess.
        raise UnsafePathError("remote path %r contains a backslash" % remote_path)
    if posixpath.isabs(remote_path):
        raise UnsafePathError("remote path %r is absolute" % remote_path)
    parts = remote_path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise UnsafePathError("remote path %r has an empty, '.' or '..' component" % remote_path)
    if any(len(part.encode("utf-8", "surrogatepass")) > NAME_MAX for part in parts):
        raise UnsafePathError("remote path %r has a component longer than %d bytes" % (remote_path, NAME_MAX))
    return parts


def dest_path(dest: str, remote_path: str, *, within: str | None = None) -> str:
    """Return the absolute local path for ``remote_path`` inside ``dest``.

    Raises UnsafePathError when :func:`check_relative` refuses the path, or when it resolves
    (following symlinks that already exist inside ``dest``) to a place outside ``within``
    (default ``dest`` itself; a wider directory holding ``dest``, such as the huggingface_hub cache
    repo folder whose ``blobs/`` a snapshot links into).
    """
    parts = check_relative(remote_path)
    root = os.path.realpath(dest)
    bound = os.path.realpath(within) if within else root
    candidate = os.path.join(root, *parts)
    # realpath follows symlinks that exist now; a link inside dest pointing out is caught here.
    resolved = os.path.realpath(candidate)
    if resolved != bound and not resolved.startswith(bound + os.sep):
        raise UnsafePathError(
            "remote path %r resolves to %s, outside %s (through a symlink inside the destination)"
            % (remote_path, resolved, bound)
        )
    return candidate
