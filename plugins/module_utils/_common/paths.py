# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a remote (Hub) path may land inside a local destination.

Private to the collection: not a public API, may change without notice.

A repository listing comes from a server: a hostile or broken one can name ``../../etc/cron.d/x``
or a path that walks through a symlink already inside the destination. Every path the collection
writes goes through :func:`dest_path` first. It also refuses a path the filesystem could not take
(longer than its PATH_MAX, or a component longer than its NAME_MAX), so that such a listing is
refused before anything is written instead of failing late with ENAMETOOLONG.

Directories made for a destination (:func:`make_dirs`) are DIR_MODE whatever the umask: the peer
exchange's nginx workers (another user) must traverse and read them.
"""

from __future__ import annotations

import errno
import os
import posixpath


# The file names of a safetensors model's weights (an index and its shards, or one file). Here, in a
# standard-library-only file, so that gpu_info (which reads the index's total_size) imports neither
# safetensors nor numpy.
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


# The longest file name Linux filesystems take (ext4, xfs): a longer one could only fail later, with OSError.
NAME_MAX = 255
# Linux's limit on a path given to a system call, its terminating NUL included (so 4095 bytes of path).
PATH_MAX = 4096
# Mode of the directories made for a destination, whatever the umask (see the module docstring).
DIR_MODE = 0o755


class UnsafePathError(ValueError):
    """A remote path that would land outside the destination directory."""


class PathTooLongError(UnsafePathError):
    """A path longer than the filesystem takes (PATH_MAX), or with a component longer than NAME_MAX."""


def _nearest_existing(path: str) -> str:
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return probe


def limits(path: str) -> tuple[int, int]:
    """(PATH_MAX, NAME_MAX) of the filesystem that holds ``path`` (or would: its nearest existing parent).

    os.pathconf where it answers, else Linux's 4096 and 255.
    """
    found = []
    for name, default in (("PC_PATH_MAX", PATH_MAX), ("PC_NAME_MAX", NAME_MAX)):
        try:
            value = os.pathconf(_nearest_existing(path), name)
        except (OSError, ValueError, AttributeError):
            value = -1
        found.append(value if isinstance(value, int) and value > 0 else default)
    return found[0], found[1]


def shorten(path: str, keep: int = 100) -> str:
    """``path`` cut in its middle to about ``keep`` characters, for a message."""
    if len(path) <= keep:
        return path
    half = keep // 2
    return "%s...(%d characters)...%s" % (path[:half], len(path) - 2 * half, path[-half:])


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


FIX_LONG = "use a shorter dest, or leave the file out (ignore_patterns)"


def check_length(path: str, *, what: str, limits_of: str | None = None, fix: str = FIX_LONG) -> None:
    """PathTooLongError when ``path`` (absolute) is too long for its filesystem, or one of its components is.

    ``what`` says what the path is in the message, ``fix`` what to do; ``limits_of``: where to ask the
    limits (default ``path``).
    """
    path_max, name_max = limits(limits_of or path)
    size = _size(path)
    if size >= path_max:
        raise PathTooLongError(
            "%s %s is %d bytes long: over this filesystem's limit of %d bytes for a path (PATH_MAX, its final NUL "
            "included); %s" % (what, shorten(path), size, path_max - 1, fix))
    for part in path.split(os.sep):
        if _size(part) > name_max:
            raise PathTooLongError(
                "%s %s has a component of %d bytes (%s): over this filesystem's limit of %d bytes for a file name "
                "(NAME_MAX); %s" % (what, shorten(path), _size(part), shorten(part, 40), name_max, fix))


def make_dirs(path: str, mode: int = DIR_MODE) -> list[str]:
    """os.makedirs(path, exist_ok=True), but every directory it makes is ``mode`` whatever the umask.

    Only the directories made here are chmodded (an existing one stays as its owner set it). Returns
    them, outermost first. FileExistsError when ``path`` exists and is not a directory.
    """
    missing = []
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    made = []
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode)
        except FileExistsError:
            continue  # made meanwhile by another writer: theirs, not ours to chmod
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        made.append(directory)
    if not os.path.isdir(path):
        raise FileExistsError(errno.EEXIST, "exists and is not a directory", path)
    return made


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
    repo folder whose ``blobs/`` a snapshot links into); PathTooLongError (one) when the local path
    is longer than the filesystem of ``dest`` takes (:func:`check_length`).
    """
    parts = check_relative(remote_path)
    root = os.path.realpath(dest)
    bound = os.path.realpath(within) if within else root
    candidate = os.path.join(root, *parts)
    check_length(candidate, what="local path", limits_of=root)
    # realpath follows symlinks that exist now; a link inside dest pointing out is caught here.
    resolved = os.path.realpath(candidate)
    if resolved != bound and not resolved.startswith(bound + os.sep):
        raise UnsafePathError(
            "remote path %r resolves to %s, outside %s (through a symlink inside the destination)"
            % (remote_path, resolved, bound)
        )
    return candidate
