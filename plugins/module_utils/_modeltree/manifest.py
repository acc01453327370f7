# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The manifest and stat cache kept in ``<dest>/.gpufleet/``, atomic writes and the directory lock.

Private to the collection: not a public API, may change without notice.

``manifest.json`` is written by hf_snapshot: what the Hub said the revision holds (commit, every
file's path, size, sha256 and the Hub's id for it) plus, per file, the stat record taken when the
file's hash was last checked. ``statcache.json`` is written by model_verify in ``auto`` mode: the
stat record of each file whose sha256 it has hashed and matched. A file whose current stat equals a
recorded one has not been touched since it was hashed, so it need not be hashed again; any change
of size, mtime, ctime or inode sends it back to hashing.

What identifies a version of a file's bytes is (size, mtime_ns, ctime_ns, ino). ctime is the key
that vouches: a rewrite with its mtime put back (touch -d, os.utime) keeps size, mtime and inode,
but the kernel moves ctime on every write, chmod, link and rename, and no system call sets it
(short of setting the clock). A record without ctime_ns (manifests written before it was
recorded) vouches for nothing: such a file is hashed once and recorded again. st_dev is recorded
for diagnosis but not compared: it names this mount, not the filesystem (NFS gives every mount a
new anonymous device number; NVMe namespaces and device-mapper minors are numbered in probe
order, so a reboot or a remount can change it), and os.statvfs's f_fsid is no better (XFS derives
it from the block device number too, as F2FS does). Ignoring it costs nothing in safety: another
filesystem mounted at the same path would have to hold a file with the same inode number, size,
mtime and ctime to the nanosecond.

``.gpufleet/`` is ours and written as root: a ``.gpufleet`` that is a symlink, or a file of ours in
it that is one, could point anywhere (writes would land there, and a manifest behind it would be
trusted). hf_snapshot and model_verify refuse it before they read or write anything there
(:func:`refuse_symlinked_meta`), and the lock is opened with O_NOFOLLOW.

The directory is made 0755 whatever the umask (the peer exchange's nginx workers, another user, read
``peer-status.json`` in it); what must stay private (staging) has its own 0700 directory.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time

from ansible_collections.gpufleet.llm.plugins.module_utils._common import jsonfile as _jsonfile
# The one atomic write (_common/files.py); hf_snapshot's code writes its JSON files through this name.
from ansible_collections.gpufleet.llm.plugins.module_utils._common.files import atomic_write_json
from ansible_collections.gpufleet.llm.plugins.module_utils._common import paths as _paths

META_DIR = ".gpufleet"
MANIFEST = "manifest.json"
STATCACHE = "statcache.json"
LOCK = "lock"
FORMAT = 1
# The keys that must all match for a record to vouch for a file (see the module docstring: not dev).
STAT_KEYS = ("size", "mtime_ns", "ctime_ns", "ino")


class ManifestError(Exception):
    """A manifest or stat cache that cannot be read or is not one of ours."""


class LockTimeout(Exception):
    """Another run holds the directory lock for longer than we were told to wait."""


class LockRefused(LockTimeout, OSError):
    """The lock file (or ``.gpufleet`` itself) is a symlink: never followed.

    A LockTimeout so that every caller that reports a lock it cannot take reports this one too, and an
    OSError so that a caller reporting what the filesystem refused (hf_snapshot's last resort) does.
    """


class SymlinkedMetaError(ManifestError):
    """``<dest>/.gpufleet``, or a file of ours in it, is a symlink (see :func:`refuse_symlinked_meta`)."""


# Mode of the directories the peer exchange's nginx (another user) must traverse or read.
DIR_MODE = _paths.DIR_MODE


def meta_dir(dest):
    return os.path.join(dest, META_DIR)


def _symlink_message(path: str, tool: str) -> str:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return ("%s is a symlink (to %s): %s refuses to follow it, since %s/ holds what gpufleet.llm trusts and writes as "
            "this user (manifest, stat cache, lock, staging) and a link could point anywhere; remove the link (a real "
            "one is made in its place) and run again" % (path, target, tool, META_DIR))


def refuse_symlinked_meta(dest: str, tool: str, names=(LOCK, MANIFEST, STATCACHE)) -> None:
    """SymlinkedMetaError when ``<dest>/.gpufleet``, or one of ``names`` in it, is a symlink.

    Shared by hf_snapshot and model_verify, called before either reads or writes anything there.
    ``tool`` names the caller in the message. ``dest`` itself may be a link (``current`` is one).
    """
    meta = meta_dir(dest)
    for path in [meta] + [os.path.join(meta, name) for name in names]:
        if os.path.islink(path):
            raise SymlinkedMetaError(_symlink_message(path, tool))


def ensure_meta_dir(dest: str) -> str:
    """``<dest>/.gpufleet``, made if missing (DIR_MODE whatever the umask, ``dest`` too); LockRefused if it
    is a symlink, NotADirectoryError if it is another file.

    An existing one without o+x (made by an earlier run under umask 077) gets g+x and o+x: nginx's
    workers must reach peer-status.json through it. Best effort: a directory we may not chmod stays.
    """
    meta = meta_dir(dest)
    _paths.make_dirs(dest, DIR_MODE)
    try:
        os.mkdir(meta, DIR_MODE)
        created = True
    except FileExistsError:
        created = False
    if os.path.islink(meta):
        raise LockRefused(_symlink_message(meta, "gpufleet.llm"))
    if not os.path.isdir(meta):
        raise NotADirectoryError(errno.ENOTDIR, "exists and is not a directory: move it away", meta)
    try:
        mode = os.lstat(meta).st_mode & 0o7777
        if created or mode & 0o011 != 0o011:
            fchmod_nofollow(meta, DIR_MODE if created else mode | 0o011)
    except OSError:
        pass
    return meta


def fchmod_nofollow(path: str, mode: int) -> None:
    """chmod a directory without following a symlink put in its place meanwhile (ELOOP then)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def stat_record(path: str) -> dict:
    """What identifies one version of a file's bytes without reading them (STAT_KEYS, plus dev).

    Follows symlinks: the record is the target's. A hard link, chmod or rename moves ctime too, so
    take the record after the last such change this run makes to the file.
    """
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino,
            "dev": st.st_dev}


def stat_matches(record: dict | None, now: dict) -> bool:
    """True when ``now`` (a stat_record) is the version ``record`` saw.

    Every key of STAT_KEYS must be in ``record`` and equal: a record without ctime_ns vouches for
    nothing. dev is not compared (a remount may change it).
    """
    if not isinstance(record, dict) or not record:
        return False
    for key in STAT_KEYS:
        value = record.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value != now.get(key):
            return False
    return True


def same_stat(record: dict | None, path: str) -> bool:
    """True when ``path`` still has exactly the stat ``record`` saw (False when it is gone)."""
    if not isinstance(record, dict) or not record:
        return False
    try:
        now = stat_record(path)
    except OSError:
        return False
    return stat_matches(record, now)


def read_json(path: str, kind: str) -> dict | None:
    """A format-1 JSON file of ours as a dict; None when absent. ``kind`` names it in errors.

    Raises ManifestError when it cannot be read, is not JSON or is not one of ours.
    """
    try:
        data = _jsonfile.read_json_file(path)
    except _jsonfile.JsonFileError as exc:
        if exc.missing:
            return None
        # A FIFO or a link to /dev/zero under a custom path must not hang or fill memory.
        raise ManifestError("%s %s cannot be read: it %s" % (kind, path, exc))
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ManifestError("%s %s is not a gpufleet.llm format-%d file" % (kind, path, FORMAT))
    return data


def read_manifest(dest):
    """The manifest of ``dest`` as a dict, or None when there is none (SymlinkedMetaError: behind a link)."""
    refuse_symlinked_meta(dest, "gpufleet.llm", names=(MANIFEST,))
    data = read_json(os.path.join(meta_dir(dest), MANIFEST), "manifest")
    if data is not None and not isinstance(data.get("files"), dict):
        raise ManifestError("manifest in %s has no files table" % meta_dir(dest))
    return data


def new_manifest(repo_id, repo_type, revision, commit, endpoint, files):
    """``files``: {path: {"size", "sha256", "hub_id", "lfs", "stat"}} (stat may be None)."""
    return {
        "format": FORMAT,
        "repo_id": repo_id,
        "repo_type": repo_type,
        "revision": revision,
        "commit": commit,
        "endpoint": endpoint,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": files,
    }


def write_manifest(dest, manifest):
    ensure_meta_dir(dest)
    atomic_write_json(os.path.join(meta_dir(dest), MANIFEST), manifest)


def read_statcache(dest):
    """{path: {"size", "mtime_ns", "ctime_ns", "ino", "dev", "sha256", "verified_at"}}; empty when absent."""
    refuse_symlinked_meta(dest, "gpufleet.llm", names=(STATCACHE,))
    data = read_json(os.path.join(meta_dir(dest), STATCACHE), "stat cache")
    if data is None:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def write_statcache(dest, files):
    ensure_meta_dir(dest)
    atomic_write_json(os.path.join(meta_dir(dest), STATCACHE), {"format": FORMAT, "files": files})


class DirLock(object):
    """Exclusive lock on ``<dest>/.gpufleet/lock`` (flock: released by the kernel if we die).

    ``timeout`` seconds to wait for another holder (0: fail at once); LockTimeout after that, whose
    message names the lock file and ``option``, the setting that sets the wait (None: the caller has
    none). On a models_root shared by several hosts (NFS, CephFS: filesystems where flock is
    cluster-wide) the holder may be a run on another host, so the message says so: nothing on this
    host shows it.

    The lock file is opened with O_NOFOLLOW, in a ``.gpufleet`` that is not a symlink: a link there
    raises LockRefused (a LockTimeout) naming it, never ELOOP.
    """

    def __init__(self, dest: str, timeout: float = 0.0, poll: float = 0.2, *, option: str | None = "lock_timeout") -> None:
        self.path = os.path.join(meta_dir(dest), LOCK)
        self.timeout = timeout
        self.poll = poll
        self.option = option
        self._fd: int | None = None

    def __enter__(self):
        ensure_meta_dir(os.path.dirname(os.path.dirname(self.path)))
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise LockRefused(_symlink_message(self.path, "gpufleet.llm"))
        deadline = time.monotonic() + max(0.0, self.timeout)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise LockTimeout(
                        "%s is locked by another run, maybe on another host sharing this storage (lock file %s, "
                        "waited %.0f s): wait for it to finish%s" % (
                            os.path.dirname(os.path.dirname(self.path)), self.path, self.timeout,
                            ", or raise %s" % self.option if self.option else ""))
                time.sleep(self.poll)
        self._fd = fd
        return self

    def __exit__(self, *exc_info):
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        return False
