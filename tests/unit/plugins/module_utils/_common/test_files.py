# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_common/files.py: the collection's one atomic write."""
from __future__ import annotations

import errno
import json
import os
import stat

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._common import files


def _names(directory):
    return sorted(os.listdir(directory))


def test_the_mode_is_set_before_a_byte_is_written(tmp_path, monkeypatch):
    """A secret is never readable by anyone the final mode would not allow, not even for an instant."""
    seen = []
    real_write = os.write

    def write(fd, data):
        seen.append((stat.S_IMODE(os.fstat(fd).st_mode), os.fstat(fd).st_size))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    path = str(tmp_path / "secret.yaml")
    files.atomic_write(path, "api-key: s3cret\n", 0o640)
    assert seen and seen[0] == (0o640, 0)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    with open(path) as handle:
        assert handle.read() == "api-key: s3cret\n"


def test_it_replaces_by_rename_after_fsync_and_syncs_the_directory(tmp_path, monkeypatch):
    path = tmp_path / "manifest.json"
    path.write_text("old\n")
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", stat.S_ISDIR(os.fstat(fd).st_mode)))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)

    def replace(src, dst):
        events.append(("replace", os.path.dirname(src) == os.path.dirname(dst), os.path.basename(src)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with open(str(path)) as reader:  # a reader holding the old file keeps reading the old file whole
        files.atomic_write(str(path), b"new\n", 0o644)
        assert reader.read() == "old\n"
    assert path.read_text() == "new\n"
    assert [e[:2] for e in events] == [("fsync", False), ("replace", True), ("fsync", True)]
    assert events[1][2].startswith(".manifest.json.")  # a temp name of its own in the same directory
    assert _names(tmp_path) == ["manifest.json"]


def test_a_failing_check_leaves_the_target_and_no_temp_file(tmp_path):
    path = tmp_path / "nginx.conf"
    path.write_text("old config\n")
    checked = []

    def refuse(new):
        checked.append((open(new).read(), stat.S_IMODE(os.stat(new).st_mode), path.read_text()))
        raise ValueError("nginx -t refused it")

    with pytest.raises(ValueError, match="refused"):
        files.atomic_write(str(path), "new config\n", 0o600, check=refuse)
    # the check saw the whole new file, already 0600, while the target still held the old one
    assert checked == [("new config\n", 0o600, "old config\n")]
    assert path.read_text() == "old config\n" and _names(tmp_path) == ["nginx.conf"]


def test_a_failed_write_leaves_the_target_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "status.json"
    path.write_text("{}\n")

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError) as err:
        files.atomic_write(str(path), "x" * 100, 0o644)
    assert err.value.errno == errno.ENOSPC
    assert path.read_text() == "{}\n" and _names(tmp_path) == ["status.json"]


def test_a_planted_fixed_temp_name_is_not_followed(tmp_path):
    """The old hand-written writes used <path>.tmp / <path>.new: a symlink planted there was written
    through. The temp name is unique and created exclusively, so nothing planted is touched."""
    outside = tmp_path / "outside"
    outside.write_text("keep\n")
    (tmp_path / "report.md.tmp").symlink_to(outside)
    (tmp_path / "report.md.new").symlink_to(outside)
    files.atomic_write(str(tmp_path / "report.md"), "report\n", 0o644)
    assert outside.read_text() == "keep\n" and (tmp_path / "report.md").read_text() == "report\n"


def test_owner_is_given_to_the_temp_file(tmp_path):
    path = str(tmp_path / "previous.yaml")
    files.atomic_write(path, "a: 1\n", 0o600, uid=os.getuid(), gid=os.getgid())
    st = os.stat(path)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (os.getuid(), os.getgid(), 0o600)


def test_json_is_indented_sorted_and_ends_with_a_newline(tmp_path):
    path = tmp_path / "doc.json"
    files.atomic_write_json(str(path), {"b": 1, "a": [1, 2]})
    text = path.read_text()
    assert text.endswith("}\n") and json.loads(text) == {"a": [1, 2], "b": 1} and text.index('"a"') < text.index('"b"')
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
