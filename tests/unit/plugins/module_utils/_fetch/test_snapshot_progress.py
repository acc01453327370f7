# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_snapshot_progress: progress.json's bytes, rate and ETA on a clock the test moves, and timings."""
from __future__ import annotations

import json
import os

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import progress as _snapshot_progress
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import snapshot_files as sf


class Clock(object):
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def setup(tmp_path, check_mode=False):
    dest = tmp_path / "d"
    staging = dest / ".gpufleet" / "staging"
    staging.mkdir(parents=True)
    big = sf.item_for(dest, "big.safetensors", b"b" * 10000)
    small = sf.item_for(dest, "small.safetensors", b"s" * 6000)
    clock = Clock(1000.0)
    progress = _snapshot_progress.Progress(str(dest), staging=str(staging), repo_id="org/m", commit="c" * 40,
                                           items=[big, small], check_mode=check_mode, clock=clock)
    return progress, staging, big, small, clock


def on_disk(tmp_path):
    with open(str(tmp_path / "d" / ".gpufleet" / "progress.json")) as handle:
        return json.load(handle)


def test_bytes_rate_eta_and_the_file(tmp_path):
    progress, staging, big, small, clock = setup(tmp_path)
    assert progress.total == 16000 and progress.bytes_done() == 0
    first = progress.write()
    assert first == on_disk(tmp_path)
    assert first["state"] == "running" and first["bytes_done"] == 0 and first["rate_bytes_s"] == 0.0
    assert first["eta_s"] is None and first["files_total"] == 2 and first["files_done"] == 0
    assert first["line"] == "org/m: 0 B / 15.6 KiB (0%), 0 B/s, ETA ?, 0/2 files"

    # 2 s later aria2 has written 4000 bytes of the big file into staging
    sf.write(staging, big.key, b"b" * 4000)
    clock.now += 2
    data = progress.write()
    assert data["bytes_done"] == 4000 and data["bytes_this_run"] == 4000
    assert data["rate_bytes_s"] == 2000.0 and data["eta_s"] == 6.0  # 12000 left at 2000 B/s
    assert data["elapsed_s"] == 2.0 and data["updated_at"] == 1002.0 and data["started_at"] == 1000.0

    # the small file was placed (stat record): it counts whole without a staging file
    small.stat = {"size": 6000}
    clock.now += 2
    data = progress.write()
    assert data["bytes_done"] == 10000 and data["files_done"] == 1 and data["rate_bytes_s"] == 2500.0
    assert data["line"] == "org/m: 9.8 KiB / 15.6 KiB (62%), 2.4 KiB/s, ETA 2s, 1/2 files"
    assert on_disk(tmp_path) == data

    # a staging file larger than the file it becomes counts no more than that file
    sf.write(staging, big.key, b"b" * 12000)
    assert progress.bytes_done() == 16000


def test_rate_window_forgets_old_samples(tmp_path):
    progress, staging, big, _small, clock = setup(tmp_path)
    progress.write()
    sf.write(staging, big.key, b"b" * 8000)
    clock.now += 30  # longer than the rate window: the only sample left is this one
    data = progress.write()
    assert data["rate_bytes_s"] == 0.0 and data["eta_s"] is None and data["bytes_done"] == 8000
    clock.now += 0.25  # samples closer than half a second give no rate yet
    assert progress.write()["rate_bytes_s"] == 0.0


def test_base_is_what_the_first_write_saw(tmp_path):
    progress, staging, big, _small, clock = setup(tmp_path)
    sf.write(staging, big.key, b"b" * 3000)  # an earlier run's partial
    assert progress.write()["bytes_this_run"] == 0
    sf.write(staging, big.key, b"b" * 5000)
    clock.now += 1
    assert progress.write()["bytes_this_run"] == 2000


def test_state_and_message(tmp_path):
    progress, _staging, _big, _small, _clock = setup(tmp_path)
    data = progress.write(state="failed", message="failed: 2 file(s)")
    assert data["state"] == "failed" and data["line"] == "failed: 2 file(s)" and on_disk(tmp_path) == data
    progress.track([])
    data = progress.write(state="done")
    assert data["bytes_total"] == 0 and data["files_total"] == 0 and "(100%)" in data["line"]


def test_check_mode_writes_nothing(tmp_path):
    progress, _staging, _big, _small, _clock = setup(tmp_path, check_mode=True)
    assert progress.write() is None
    assert not os.path.exists(str(tmp_path / "d" / ".gpufleet" / "progress.json"))


def test_timings_add_up_per_phase():
    clock = Clock(10.0)
    timings = _snapshot_progress.Timings(clock)
    clock.now = 10.5
    mark = timings.took("resolve", 10.0)
    assert mark == 10.5
    clock.now = 12.0
    timings.took("aria2", mark)
    clock.now = 13.0
    timings.took("resolve", 12.75)
    assert timings.as_dict() == {"aria2": 1.5, "resolve": 0.75}


def test_human():
    assert _snapshot_progress.human(0) == "0 B"
    assert _snapshot_progress.human(1023) == "1023 B"
    assert _snapshot_progress.human(1536) == "1.5 KiB"
    assert _snapshot_progress.human(3 * 2**30) == "3.0 GiB"
    assert _snapshot_progress.human(5 * 2**50) == "5120.0 TiB"
