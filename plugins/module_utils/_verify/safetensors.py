# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Structure of a safetensors model tree: the index, each shard's header and size, the weight_map.

Private to the collection: not a public API, may change without notice.

The safetensors library is the judge of a shard: ``safe_open`` parses only the header (the file is
memory-mapped, the data is never read) and rejects a header whose tensors do not cover the data
region exactly -- a truncated shard or trailing bytes. Its messages are terse ("incomplete metadata,
file not fully covered" for both), so when it rejects a file we read the 8-byte length and the
header ourselves to say which of the two happened and by how many bytes. For a shard it accepts,
the data region is exactly ``size - 8 - header_len`` bytes, which is also the sum of its tensors'
bytes: no header JSON needs parsing in Python on the fast path.
"""

from __future__ import annotations

import os
import stat
import traceback

from ansible_collections.gpufleet.llm.plugins.module_utils._common import jsonfile as _jsonfile
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._common.paths import INDEX, SINGLE, UnsafePathError, dest_path

try:
    from safetensors import SafetensorError, safe_open

    HAS_SAFETENSORS = True
    SAFETENSORS_IMPORT_ERROR = None
except ImportError:  # the module reports it with missing_required_lib
    HAS_SAFETENSORS = False
    SAFETENSORS_IMPORT_ERROR = traceback.format_exc()

    class SafetensorError(Exception):
        """Stand-in so that except clauses still parse without the library."""

try:
    # safe_open needs a framework to hand tensors to even when only the header is read; numpy is
    # the lightest one (safetensors imports it while opening a file).
    import numpy  # noqa: F401  pylint: disable=unused-import

    HAS_NUMPY = True
    NUMPY_IMPORT_ERROR = None
except ImportError:
    HAS_NUMPY = False
    NUMPY_IMPORT_ERROR = traceback.format_exc()

# safetensors refuses headers above 100 MB (its MAX_HEADER_SIZE).
MAX_HEADER = 100_000_000
FIX_REFETCH = "re-fetch it (hf_snapshot)"


def _short(name: str) -> str:
    """A tensor name for a problem line: a hostile header may hold names of megabytes."""
    return name if len(name) <= 120 else name[:117] + "..."


class Shard(object):
    """What one shard's header says: its tensors and the byte counts of its parts."""

    __slots__ = ("rel", "size", "header_len", "data_len", "tensors", "metadata")

    def __init__(self, rel, size, header_len, data_len, tensors, metadata):
        self.rel = rel
        self.size = size
        self.header_len = header_len
        self.data_len = data_len
        self.tensors = tensors
        self.metadata = metadata


class ShardError(Exception):
    """One shard that cannot be what its header claims; str() names the file and the fix."""


class IndexError_(Exception):
    """The index file cannot be used; str() names the file and the fix."""


def find_weights(root):
    """How the tree lays out its weights: ("index", INDEX), ("single", SINGLE) or (None, None).

    With an index present, a model.safetensors beside it is a stray the index does not name.
    """
    if os.path.lexists(os.path.join(root, INDEX)):
        return "index", INDEX
    if os.path.lexists(os.path.join(root, SINGLE)):
        return "single", SINGLE
    return None, None


def load_index(root):
    """Parse the index: returns (weight_map {tensor: shard rel path}, metadata.total_size or None).

    total_size is returned as the index has it (an integral float as an int): it is advisory, and
    the total_size check judges it (_verify_steps._check_total_size).

    Raises IndexError_ when it is missing, unreadable, not JSON or not shaped like an index.
    """
    path = os.path.join(root, INDEX)
    fix = "re-fetch %s" % INDEX
    try:
        data = _jsonfile.read_json_file(path)
    except _jsonfile.JsonFileError as exc:
        raise IndexError_("%s %s; %s" % (INDEX, "cannot be read (it is missing)" if exc.missing else exc, fix))
    if not isinstance(data, dict):
        raise IndexError_("%s is not a JSON object; %s" % (INDEX, fix))
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise IndexError_("%s has no weight_map or an empty one; %s" % (INDEX, fix))
    # Longer than PATH_MAX cannot be a file name, and would make every problem line that names it huge.
    bad = [k for k, v in weight_map.items() if not isinstance(v, str) or not v or len(v) > 4096]
    if bad:
        raise IndexError_("%s maps %d tensor(s) to no file name (e.g. %s); %s" % (INDEX, len(bad), _short(bad[0]), fix))
    metadata = data.get("metadata")
    total = None
    if isinstance(metadata, dict) and "total_size" in metadata:
        total = metadata["total_size"]
        # JSON may carry it as a float (1.2e9); compare as an integer when it is one.
        if isinstance(total, float) and total.is_integer():
            total = int(total)
    return weight_map, total


def resolve_shard(root, rel, *, within=None):
    """Absolute path of a shard named by the index; ShardError if unsafe, missing or not a file.

    A symlink is fine as long as it resolves inside ``within`` (default ``root``); one that leads
    out of it is a problem (the server would load bytes nothing here verified or pinned).
    """
    try:
        path = dest_path(root, rel, within=within)
    except UnsafePathError as exc:
        plain = os.path.join(root, rel)
        if not os.path.isabs(rel) and ".." not in rel.split("/") and os.path.islink(plain):
            raise ShardError("%s is a symlink to %s, outside %s; replace it with the file itself or %s"
                             % (rel, os.path.realpath(plain), within or root, FIX_REFETCH))
        raise ShardError("%s: unsafe shard name in %s (%s); re-fetch the index" % (rel, INDEX, exc))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise ShardError("%s is a dangling symlink (to %s); %s" % (rel, os.readlink(path), FIX_REFETCH))
        raise ShardError("%s is missing (named in the weights index); %s" % (rel, FIX_REFETCH))
    except OSError as exc:
        raise ShardError("%s cannot be read (%s); %s" % (rel, exc.strerror or exc, FIX_REFETCH))
    if not stat.S_ISREG(st.st_mode):
        raise ShardError("%s is not a regular file; remove it and %s" % (rel, FIX_REFETCH))
    return path


def _describe_rejection(path, rel, size, header_len, lib_message):
    """Why the library rejected ``path``: read the header ourselves to say precisely."""
    with open(path, "rb") as handle:
        handle.seek(8)
        raw = handle.read(header_len)
    if len(raw) < header_len:
        return "%s: truncated inside its header (%d of %d header bytes present); %s" % (
            rel, len(raw), header_len, FIX_REFETCH)
    try:
        header = _jsonfile.parse_json(raw, invalid="is not JSON")
    except _jsonfile.JsonFileError as exc:
        return "%s: header %s; the file is corrupt, %s" % (rel, exc, FIX_REFETCH)
    if not isinstance(header, dict):
        return "%s: header is not a JSON object; the file is corrupt, %s" % (rel, FIX_REFETCH)
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            spans.append((int(info["data_offsets"][0]), int(info["data_offsets"][1])))
        # OverflowError: JSON reads 1e400 as inf, which int() refuses with it.
        except (TypeError, KeyError, IndexError, ValueError, OverflowError):
            return "%s: header entry %r has no valid data_offsets; the file is corrupt, %s" % (
                rel, _short(name), FIX_REFETCH)
    spans.sort()
    data_end = 0
    for begin, end in spans:
        if begin != data_end or end < begin:
            return "%s: header's data_offsets overlap or leave gaps (at byte %d of the data; safetensors: %s); the " \
                   "file is corrupt, %s" % (rel, data_end, lib_message, FIX_REFETCH)
        data_end = end
    expected = 8 + header_len + data_end
    if size < expected:
        return "%s: truncated: %d bytes, its header needs %d (8 + %d header + %d data): %d bytes missing; %s" % (
            rel, size, expected, header_len, data_end, expected - size, FIX_REFETCH)
    if size > expected:
        return "%s: %d trailing bytes after the data end at byte %d (file is %d bytes); %s" % (
            rel, size - expected, expected, size, FIX_REFETCH)
    return "%s: safetensors rejects its header (%s); %s" % (rel, lib_message, FIX_REFETCH)


def inspect_shard(path, rel):
    """Parse one shard's header with safetensors; returns a Shard or raises ShardError.

    Checks: non-empty, a sane header length, the header parses, and the file size equals
    8 + header length + data length exactly (safe_open enforces the last).
    """
    try:
        size = os.path.getsize(path)
        if size == 0:
            raise ShardError("%s is a zero-byte file; %s" % (rel, FIX_REFETCH))
        if size < 8:
            raise ShardError("%s is %d bytes, too short for the 8-byte header length; %s" % (rel, size, FIX_REFETCH))
        with open(path, "rb") as handle:
            header_len = int.from_bytes(handle.read(8), "little")
        if header_len == 0:
            raise ShardError("%s: header length field is 0 (garbage); the file is corrupt, %s" % (rel, FIX_REFETCH))
        if header_len > size - 8:
            raise ShardError(
                "%s: header length field says %d bytes but only %d follow (garbage length field or a file "
                "truncated inside its header); %s" % (rel, header_len, size - 8, FIX_REFETCH))
        if header_len > MAX_HEADER:
            raise ShardError("%s: header length field says %d bytes, above safetensors' limit of %d (garbage); %s"
                             % (rel, header_len, MAX_HEADER, FIX_REFETCH))
        try:
            with safe_open(path, "numpy") as handle:
                tensors = handle.keys()
                metadata = handle.metadata()
        except SafetensorError as exc:
            raise ShardError(_describe_rejection(path, rel, size, header_len, exc))
    except OSError as exc:
        raise ShardError("%s cannot be read (%s); %s" % (rel, exc.strerror or exc, FIX_REFETCH))
    return Shard(rel, size, header_len, size - 8 - header_len, tensors, metadata)


def cross_check(weight_map, shards):
    """Compare the index's weight_map with the shard headers.

    ``shards``: {rel: tensor names} for every shard whose header parsed. Tensors of shards whose
    header did not parse are not judged here (that shard already is a problem).
    Returns a list of problem lines, grouped per shard so that a 3,000-tensor mismatch is one line.
    """
    problems = []
    where = {}
    for rel, names in shards.items():
        for name in names:
            where.setdefault(name, []).append(rel)
    expected = {}
    for tensor, rel in weight_map.items():
        expected.setdefault(rel, []).append(tensor)

    for rel in sorted(shards):
        want = expected.get(rel, [])
        have = set(shards[rel])
        missing = [t for t in want if t not in have]
        wrong = [t for t in missing if where.get(t)]
        absent = [t for t in missing if not where.get(t)]
        if wrong:
            elsewhere = sorted({s for t in wrong for s in where[t]})
            problems.append(
                "%s: %d tensor(s) that %s maps to it are in %s instead (e.g. %s); the index and the shards "
                "disagree, re-fetch %s and the shards"
                % (rel, len(wrong), INDEX, ", ".join(elsewhere), _short(wrong[0]), INDEX))
        if absent:
            problems.append(
                "%s: %d tensor(s) that %s maps to it are not in its header nor in any other shard (e.g. %s); %s"
                % (rel, len(absent), INDEX, _short(absent[0]), FIX_REFETCH))
        extra = [t for t in shards[rel] if weight_map.get(t) != rel]
        unmapped = [t for t in extra if t not in weight_map]
        if unmapped:
            problems.append(
                "%s: %d tensor(s) in its header are not in %s's weight_map (e.g. %s); re-fetch %s and the shards"
                % (rel, len(unmapped), INDEX, _short(unmapped[0]), INDEX))
    for name, rels in where.items():
        if len(rels) > 1:
            problems.append("tensor %s is in the headers of %d shards (%s); re-fetch the shards"
                            % (_short(name), len(rels), ", ".join(sorted(rels))))
    return problems


def walk_files(root: str, skip_dirs: tuple = (_manifest.META_DIR, ".git")) -> list:
    """Every file (and symlink) under ``root`` as a sorted list of relative paths.

    ``.gpufleet`` (our metadata and hf_snapshot's staging area) and ``.git`` are not model files.
    Symlinked directories are not followed.
    """
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in skip_dirs]
            rel_dir = ""
        for name in filenames:
            out.append(os.path.join(rel_dir, name) if rel_dir else name)
        # A symlink to a directory appears in dirnames and is not walked; still list it.
        for name in dirnames:
            if os.path.islink(os.path.join(dirpath, name)):
                out.append(os.path.join(rel_dir, name) if rel_dir else name)
    out.sort()
    return out
