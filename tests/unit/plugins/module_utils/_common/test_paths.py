# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._common.paths import UnsafePathError, dest_path


def test_plain_and_nested_paths_land_inside(tmp_path):
    assert dest_path(str(tmp_path), "config.json") == os.path.join(os.path.realpath(tmp_path), "config.json")
    assert dest_path(str(tmp_path), "a/b/model-00001-of-000064.safetensors").endswith(
        "/a/b/model-00001-of-000064.safetensors"
    )


@pytest.mark.parametrize(
    "remote",
    ["", "/etc/passwd", "../x", "a/../../x", "a/./b", "a//b", "a/", "x\x00y", "a\\..\\b", ".."],
)
def test_unsafe_names_are_refused(tmp_path, remote):
    with pytest.raises(UnsafePathError):
        dest_path(str(tmp_path), remote)


def test_symlink_inside_dest_pointing_out_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "sub").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="outside"):
        dest_path(str(dest), "sub/file.bin")


def test_symlink_inside_dest_pointing_inside_is_allowed(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    assert dest_path(str(tmp_path), "alias/f").endswith("/alias/f")
