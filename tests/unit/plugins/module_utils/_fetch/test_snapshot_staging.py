# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_snapshot_staging: staging files hashed before they count, placed by rename, links verified."""
from __future__ import annotations

import hashlib
import os

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _snapshot_plan
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _snapshot_staging
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import snapshot_files as sf

DATA = b"weights " * 1000


def test_hash_staged_notices_a_file_that_moved_while_hashed(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 1000)
    remote = _hub.RemoteFile("f", 1000, "0" * 40, hashlib.sha256(b"x" * 1000).hexdigest(), True)
    ok, digest, record = _snapshot_staging.hash_staged(str(path), remote)
    assert ok and digest == remote.sha256 and _manifest.same_stat(record, str(path))
    real_verify = _snapshot_plan.verify_local

    def verify_then_touch(*args):
        res = real_verify(*args)
        os.utime(str(path), ns=(0, 123456789))  # a write after the hash read the bytes
        return res

    monkeypatch.setattr(_snapshot_plan, "verify_local", verify_then_touch)
    ok, digest, record = _snapshot_staging.hash_staged(str(path), remote)
    assert record is None  # the caller must hash it again before trusting it


def test_leftovers_are_hashed_before_they_count(tmp_path):
    staging = _snapshot_staging.make_staging(str(tmp_path))
    assert staging == _snapshot_staging.staging_dir(str(tmp_path)) and os.stat(staging).st_mode & 0o777 == 0o700
    item = sf.item_for(tmp_path, "a.safetensors", DATA)
    staged = os.path.join(staging, item.key)
    # nothing staged, an orphan control file: removed, nothing to place
    sf.write(staging, item.key + ".aria2", b"ctl")
    assert not _snapshot_staging.settle_leftover(item, staged) and not os.path.exists(staged + ".aria2")
    # a partial with its control file: aria2 resumes it
    sf.write(staging, item.key, DATA[:100])
    sf.write(staging, item.key + ".aria2", b"ctl")
    assert not _snapshot_staging.settle_leftover(item, staged) and item.resumed and os.path.exists(staged)
    os.unlink(staged + ".aria2")
    # full length, no control file, wrong bytes (a preallocated file): removed, fetched again
    item.resumed = False
    sf.write(staging, item.key, b"\0" * len(DATA))
    assert not _snapshot_staging.settle_leftover(item, staged) and not os.path.exists(staged) and not item.resumed
    # whole and right: ready to place
    sf.write(staging, item.key, DATA)
    item.sha256 = None
    assert _snapshot_staging.settle_leftover(item, staged) and item.resumed
    assert item.sha256 == hashlib.sha256(DATA).hexdigest()


def test_a_direct_downloads_prefix_is_kept_for_its_range_resume(tmp_path):
    """A prefix the module's own GET wrote (marked DIRECT_MARK) is resumed, not taken for a
    preallocated aria2 file; a whole-length one is hashed like any other, and the mark goes."""
    staging = _snapshot_staging.make_staging(str(tmp_path))
    item = sf.item_for(tmp_path, "a.safetensors", DATA)
    staged = os.path.join(staging, item.key)
    sf.write(staging, item.key, DATA[:100])
    _snapshot_staging.mark_direct(staged)
    assert not _snapshot_staging.settle_leftover(item, staged) and item.resumed
    assert os.path.getsize(staged) == 100 and os.path.exists(staged + _snapshot_staging.DIRECT_MARK)
    # unmarked, the same prefix is not trusted (aria2 -c would take it as done up to its length)
    os.unlink(staged + _snapshot_staging.DIRECT_MARK)
    item.resumed = False
    assert not _snapshot_staging.settle_leftover(item, staged) and not os.path.exists(staged) and not item.resumed
    # marked and whole: hashed, the mark removed
    sf.write(staging, item.key, DATA)
    _snapshot_staging.mark_direct(staged)
    assert _snapshot_staging.settle_leftover(item, staged) and not os.path.exists(staged + _snapshot_staging.DIRECT_MARK)
    # a mark without its file goes
    os.unlink(staged)
    _snapshot_staging.mark_direct(staged)
    assert not _snapshot_staging.settle_leftover(item, staged) and not os.listdir(staging)


def test_place_renames_into_the_tree(tmp_path):
    dest = tmp_path / "d"
    staging = _snapshot_staging.make_staging(str(dest))
    item = sf.item_for(dest, "sub/a.safetensors", DATA)
    staged = sf.write(staging, item.key, DATA)
    os.chmod(staged, 0o600)
    _snapshot_staging.place(item, staged, str(dest))
    assert not os.path.exists(staged) and (dest / "sub" / "a.safetensors").read_bytes() == DATA
    assert os.stat(item.final).st_mode & 0o777 == 0o644 and item.stat == _manifest.stat_record(item.final)
    # a directory where the revision has a file is never replaced
    blocked = sf.item_for(dest, "dir", DATA)
    os.makedirs(blocked.final)
    with pytest.raises(SnapshotError) as err:
        _snapshot_staging.place(blocked, sf.write(staging, blocked.key, DATA), str(dest))
    assert "is a directory" in err.value.msg


@pytest.mark.parametrize("in_the_way", ["sub", "sub/deeper"])
def test_a_file_where_the_revision_has_a_folder_is_named_not_a_traceback(tmp_path, in_the_way):
    """A file (or a dangling link) of the tree stands where a listed path needs a folder: the message
    names it (before: NotADirectoryError/FileExistsError from makedirs, a traceback)."""
    dest = tmp_path / "d"
    staging = _snapshot_staging.make_staging(str(dest))
    item = sf.item_for(dest, "sub/deeper/a.safetensors", DATA)
    os.makedirs(os.path.dirname(str(dest / in_the_way)), exist_ok=True)
    (dest / in_the_way).write_bytes(b"an old file")
    staged = sf.write(staging, item.key, DATA)
    with pytest.raises(SnapshotError) as err:
        _snapshot_staging.place(item, staged, str(dest))
    assert err.value.msg.startswith("%s is a file where the revision has a folder" % (dest / in_the_way)), err.value.msg
    assert "move it away" in err.value.msg and os.path.exists(staged)
    assert (dest / in_the_way).read_bytes() == b"an old file"
    os.unlink(str(dest / in_the_way))
    os.symlink("missing", str(dest / in_the_way))  # dangling, inside dest (a link out is _paths' refusal)
    with pytest.raises(SnapshotError, match="is a file where the revision has a folder"):
        _snapshot_staging.place(item, staged, str(dest))


def test_link_from_source_checks_the_source(tmp_path):
    v1, dest = tmp_path / "v1", tmp_path / "v2"
    source = sf.write(v1, "a.safetensors", DATA)
    staging = _snapshot_staging.make_staging(str(dest))
    item = sf.item_for(dest, "a.safetensors", DATA)
    item.source = (source, sf.record(source, item.remote))
    assert _snapshot_staging.link_from_source(item, staging, str(dest))
    assert os.stat(item.final).st_ino == os.stat(source).st_ino and item.sha256 == hashlib.sha256(DATA).hexdigest()
    # the source changed since its manifest record: its bytes decide (same size, other bytes: no link)
    other = sf.item_for(tmp_path / "v3", "a.safetensors", DATA)
    other.source = (source, sf.record(source, other.remote))
    with open(source, "r+b") as handle:
        handle.write(b"X")
    os.utime(source, ns=(0, 10**9))
    assert not _snapshot_staging.link_from_source(other, staging, str(tmp_path / "v3"))
    assert not os.path.exists(other.final)


def test_link_duplicate_and_cleanup(tmp_path):
    dest = tmp_path / "d"
    staging = _snapshot_staging.make_staging(str(dest))
    first = sf.item_for(dest, "a.safetensors", DATA)
    other = sf.item_for(dest, "copy/a.safetensors", DATA)
    _snapshot_staging.place(first, sf.write(staging, first.key, DATA), str(dest))
    _snapshot_staging.link_duplicate(first, other, staging, str(dest))
    assert os.stat(other.final).st_ino == os.stat(first.final).st_ino and other.sha256 == first.sha256
    assert other.stat == _manifest.stat_record(other.final)
    os.makedirs(os.path.join(staging, _snapshot_staging.ARIA2_WORKDIR))
    _snapshot_staging.cleanup(str(dest))
    assert not os.path.exists(staging)
