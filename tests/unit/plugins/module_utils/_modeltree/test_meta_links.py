# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 20 item 5: ``<path>/.gpufleet`` and the files of ours in it are never followed through a symlink.

model_verify used to write its lock and stat cache wherever a linked ``.gpufleet`` pointed, and to trust
the manifest behind it; hf_snapshot refused that layout. Both now share
_manifest.refuse_symlinked_meta, and every lock is opened with O_NOFOLLOW (ELOOP becomes a message).
Real files, no mocks."""
from __future__ import annotations

import os
import shutil

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import verify as _verify
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import model_trees as mt


def _tree_with_linked_meta(trees, tmp_path):
    """The target tree, its real .gpufleet moved to ``elsewhere`` and linked back; elsewhere's contents."""
    target = trees[0]
    elsewhere = tmp_path / "elsewhere"
    shutil.move(os.path.join(target, ".gpufleet"), str(elsewhere))
    os.symlink(str(elsewhere), os.path.join(target, ".gpufleet"))
    return target, elsewhere, {name: (elsewhere / name).read_bytes() for name in os.listdir(str(elsewhere))}


@pytest.mark.parametrize("mode", ["auto", "full", "quick"])
def test_model_verify_refuses_a_symlinked_meta_dir(trees, tmp_path, mode):
    target, elsewhere, before = _tree_with_linked_meta(trees, tmp_path)
    with pytest.raises(_verify.VerifyError) as err:
        _verify.verify(target, mode=mode)
    msg = err.value.fail_kwargs()["msg"]
    assert os.path.join(target, ".gpufleet") in msg and "is a symlink (to %s)" % elsewhere in msg, msg
    assert "model_verify" in msg and "remove the link" in msg, msg
    # nothing written behind the link: no lock, no stat cache, the manifest untouched
    assert {name: (elsewhere / name).read_bytes() for name in os.listdir(str(elsewhere))} == before
    assert "lock" not in before and "statcache.json" not in before


def test_model_verify_module_run_fails_with_the_message(trees, tmp_path):
    target, elsewhere, dummy = _tree_with_linked_meta(trees, tmp_path)
    params = {name: entry.get("default") for name, entry in _verify.argument_spec().items()}
    params.update(path=target)
    with pytest.raises(_verify.VerifyError, match="symlink"):
        _verify.run_module(params, check_mode=False)
    assert sorted(os.listdir(str(elsewhere))) == ["manifest.json"]


@pytest.mark.parametrize("name", ["lock", "statcache.json", "manifest.json"])
def test_model_verify_refuses_a_symlinked_file_in_meta(trees, tmp_path, name):
    target = trees[0]
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    link = os.path.join(target, ".gpufleet", name)
    if os.path.exists(link):
        os.unlink(link)
    os.symlink(str(victim), link)
    with pytest.raises(_verify.VerifyError) as err:
        _verify.verify(target, mode="auto")
    assert link in err.value.fail_kwargs()["msg"]
    assert victim.read_bytes() == b"precious\n"


def test_model_verify_still_works_on_a_real_meta_dir_through_a_linked_path(trees, tmp_path):
    """``current`` is a symlink to the commit directory: the path may be a link, only .gpufleet may not."""
    target = trees[0]
    current = tmp_path / "current"
    os.symlink(target, str(current))
    res = _verify.verify(str(current), mode="auto")
    assert res["ok"], res["problems"]
    assert os.path.isfile(os.path.join(target, ".gpufleet", "statcache.json"))


def test_lock_that_is_a_symlink_is_refused_by_name(tmp_path):
    """O_NOFOLLOW: the lock is never created or truncated through a link; ELOOP turns into LockRefused."""
    dest = tmp_path / "d"
    (dest / ".gpufleet").mkdir(parents=True)
    victim = tmp_path / "victim"
    os.symlink(str(victim), str(dest / ".gpufleet" / "lock"))  # dangling: O_CREAT would make the victim
    with pytest.raises(Exception) as err:  # noqa: B017 (the type is checked below; before the fix: no error)
        with _manifest.DirLock(str(dest)):
            pass
    assert isinstance(err.value, _manifest.LockRefused), repr(err.value)  # not a bare ELOOP OSError
    assert isinstance(err.value, _manifest.LockTimeout)  # every caller that reports a lock reports this
    assert str(dest / ".gpufleet" / "lock") in str(err.value) and "symlink" in str(err.value)
    assert not os.path.lexists(str(victim))


def test_lock_in_a_symlinked_meta_dir_is_refused(tmp_path):
    dest = tmp_path / "d"
    dest.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(str(elsewhere), str(dest / ".gpufleet"))
    with pytest.raises(_manifest.LockRefused, match="is a symlink"):
        with _manifest.DirLock(str(dest)):
            pass
    with pytest.raises(_manifest.LockRefused):
        _manifest.write_statcache(str(dest), {})
    assert os.listdir(str(elsewhere)) == []


def test_statcache_behind_a_link_is_not_read(tmp_path):
    dest = tmp_path / "d"
    (dest / ".gpufleet").mkdir(parents=True)
    elsewhere = tmp_path / "cache.json"
    elsewhere.write_text('{"format": 1, "files": {"a": {"sha256": "x"}}}')
    os.symlink(str(elsewhere), str(dest / ".gpufleet" / "statcache.json"))
    with pytest.raises(_manifest.SymlinkedMetaError):
        _manifest.read_statcache(str(dest))


def test_refuse_symlinked_meta_accepts_a_plain_layout(tmp_path):
    dest = tmp_path / "d"
    dest.mkdir()
    _manifest.refuse_symlinked_meta(str(dest), "t")  # no .gpufleet at all
    mt.write_manifest(str(dest))
    _manifest.refuse_symlinked_meta(str(dest), "t")
    with _manifest.DirLock(str(dest)):
        pass
    _manifest.refuse_symlinked_meta(str(dest), "t")


@pytest.mark.parametrize("name", ["lock", "manifest.json"])
def test_hf_snapshot_refuses_a_symlinked_lock_or_manifest(lab_hub, aria2c, tmp_path, name):
    """The same shared check in hf_snapshot: before, a dangling lock link made its target (O_CREAT)."""
    from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot  # pylint: disable=import-outside-toplevel

    dest = tmp_path / "d"
    (dest / ".gpufleet").mkdir(parents=True)
    victim = tmp_path / "victim"
    os.symlink(str(victim), str(dest / ".gpufleet" / name))
    with pytest.raises(_snapshot.SnapshotError) as err:
        _snapshot.snapshot(dict(repo_id="gpufleet-lab/Kimi-K2.6-mini", revision="main", dest=str(dest),
                                endpoint=lab_hub.api, min_free_bytes=0, allow_patterns=["config.json"]))
    assert str(dest / ".gpufleet" / name) in err.value.msg and "hf_snapshot" in err.value.msg
    assert not os.path.lexists(str(victim)) and not (dest / "config.json").exists()
