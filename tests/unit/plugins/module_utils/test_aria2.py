# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_aria2: input file, argv, result parsing, and real aria2c runs against the lab Hub."""
from __future__ import annotations

import hashlib
import os
import stat
import urllib.request

from ansible_collections.gpufleet.llm.plugins.module_utils import _aria2

SHA = "ab" * 32


def test_render_input_per_file_options():
    files = [
        _aria2.Aria2File("k1", "http://cdn/a?sig=1", "/d/s", "k1", SHA, 10),
        _aria2.Aria2File("k2", "http://hub/b", "/d/s", "k2", None, 5),
    ]
    text = _aria2.render_input(files, proxy="http://user:pw@proxy:3128")
    lines = text.splitlines()
    assert lines[0] == "http://cdn/a?sig=1"
    assert "  out=k1" in lines and "  dir=/d/s" in lines
    assert "  checksum=sha-256=%s" % SHA in lines
    assert text.count("checksum=") == 1  # only the LFS file has a sha256
    assert "  gid=%s" % _aria2.gid_for(0) in lines and "  gid=%s" % _aria2.gid_for(1) in lines
    assert text.count("all-proxy=http://user:pw@proxy:3128") == 2


def test_gids_are_distinct_in_the_six_digits_the_table_shows():
    prefixes = {_aria2.gid_for(i)[:_aria2.GID_WIDTH] for i in range(5000)}
    assert len(prefixes) == 5000
    assert all(len(_aria2.gid_for(i)) == 16 for i in (0, 99, 4999))


def test_render_input_refuses_newlines():
    bad = _aria2.Aria2File("k", "http://x/a\n  out=/etc/passwd", "/d", "k", None, 1)
    try:
        _aria2.render_input([bad])
    except ValueError as exc:
        assert "newline" in str(exc)
    else:
        raise AssertionError("a newline in a URL must be refused")


def test_write_input_is_0600_even_over_an_existing_file(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("old")
    os.chmod(path, 0o644)
    _aria2.write_input(str(path), "x\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_text() == "x\n"


def test_argv_has_tuning_only():
    argv = _aria2.build_argv("aria2c", "/d/in.txt", "/d/log", connections=16, splits=16, parallel_files=6,
                             min_split_size="20M")
    joined = " ".join(argv)
    assert "http" not in joined and "header" not in joined and "Authorization" not in joined
    for expected in ("--continue=true", "--auto-file-renaming=false", "--auto-save-interval=1",
                     "--max-connection-per-server=16", "--split=16", "--max-concurrent-downloads=6",
                     "--min-split-size=20M", "--input-file=/d/in.txt"):
        assert expected in argv
    # aria2 caps -x at 16
    assert "--max-connection-per-server=16" in _aria2.build_argv("aria2c", "i", "l", connections=64)


def test_exit_code_meanings_from_the_field():
    assert "not found" in _aria2.explain(3)
    assert "disk space" in _aria2.explain(9)
    assert "bad HTTP response" in _aria2.explain(22)
    assert "authorization failed" in _aria2.explain(24)
    assert "checksum" in _aria2.explain(32)
    assert "interrupted" in _aria2.explain(7)
    assert "77" in _aria2.explain(77)


STDOUT = """
Download Results:
gid   |stat|avg speed  |  %|path/URI
======+====+===========+===+===================================================
000001|ERR |       0B/s|  -|/tmp/a2t/s/f1
000003|ERR |       0B/s|  -|/tmp/a2t/s/f3
000002|OK  |   3.1MiB/s|100|/tmp/a2t/s/f2

Status Legend:
(OK):download completed.(ERR):error occurred.
"""

LOG = """2026-12-02 13:40:58.1 [INFO] [HttpConnection.cc:222] CUID#7 - Response received:
HTTP/1.1 429 Too Many Requests
Retry-After: 3

2026-12-02 13:40:58.2 [ERROR] CUID#7 - Download aborted. URI=http://cdn/a?sig=1
Exception: [AbstractCommand.cc:351] errorCode=22 URI=http://cdn/a?sig=1
  -> [HttpSkipResponseCommand.cc:239] errorCode=22 The response status is not successful. status=429
2026-12-02 13:41:02.0 [ERROR] [CheckIntegrityCommand.cc:84] Checksum error detected. file=/tmp/a2t/s/f1
"""


def test_parse_results_and_log():
    assert _aria2.parse_results(STDOUT) == {"000001": "ERR", "000003": "ERR", "000002": "OK"}
    errors, checksum_failed, retry_after = _aria2.parse_log(LOG)
    assert errors["http://cdn/a?sig=1"] == (22, "The response status is not successful. status=429", 429)
    assert checksum_failed == {"/tmp/a2t/s/f1"}
    assert retry_after == 3


def test_completed_paths_and_log_tail(tmp_path):
    lines = [
        "2026-12-02 14:16:02.440697 [NOTICE] [RequestGroup.cc:1214] Download complete: /s/blob-73e7",
        "2026-12-02 14:16:02.441 [INFO] [DownloadCommand.cc:242] CUID#8 - The download for one segment completed successfully.",
        "2026-12-02 14:16:09.126 [NOTICE] [CheckIntegrityCommand.cc:76] Verification finished successfully. file=/s/x",
        "2026-12-02 14:16:09.126836 [NOTICE] [RequestGroup.cc:1214] Download complete: /s/with space",
    ]
    assert _aria2.completed_paths(lines) == ["/s/blob-73e7", "/s/with space"]
    log = tmp_path / "aria2.log"
    tail = _aria2._LogTail(str(log))
    assert tail.lines() == []  # no log yet
    log.write_text(lines[0] + "\n" + lines[1][:20])
    assert tail.lines() == [lines[0]]  # a half-written line waits for its end
    with open(log, "a") as handle:
        handle.write(lines[1][20:] + "\n")
    assert tail.lines() == [lines[1]]
    assert tail.lines() == []


def _lfs_entry(hub, repo, path):
    sha, files = hub.files_at(repo, "main")
    return sha, files[path]


def _signed(hub, sha256):
    with urllib.request.urlopen(hub.api + "/_lab/sign?sha256=" + sha256, timeout=10) as resp:
        body = resp.read().decode()
    import json

    return json.loads(body)["url"]


def test_real_run_ok_checksum_failure_and_404(lab_hub, aria2c, tmp_path):
    dummy, entry = _lfs_entry(lab_hub, "gpufleet-lab/Kimi-K2.6-mini", "model-00001-of-000004.safetensors")
    sha = entry["lfs"]["sha256"]
    url = _signed(lab_hub, sha)
    staging = tmp_path / "staging"
    staging.mkdir()
    files = [
        _aria2.Aria2File("good", url, str(staging), "good", sha, entry["size"]),
        _aria2.Aria2File("badsum", url, str(staging), "badsum", "0" * 64, entry["size"]),
        _aria2.Aria2File("missing", lab_hub.api + "/gpufleet-lab/Kimi-K2.6-mini/resolve/main/nope.bin",
                         str(staging), "missing", None, 1),
    ]
    ticks = []
    completed = []
    result = _aria2.run(files, str(tmp_path / "run"), aria2c=aria2c, tick=lambda: ticks.append(1),
                        tick_interval=0.2, connections=4, splits=4, min_split_size="1M",
                        on_complete=completed.append)
    assert result.outcomes["good"].status == "OK"
    # on_complete heard of the finished file (from aria2's log), and only of it
    assert completed == ["good"]
    with open(staging / "good", "rb") as handle:
        assert hashlib.sha256(handle.read()).hexdigest() == sha
    assert result.outcomes["badsum"].status == "ERR" and result.outcomes["badsum"].code == 32
    assert result.outcomes["missing"].status == "ERR"
    assert result.outcomes["missing"].code == 3 or result.outcomes["missing"].http_status == 404
    assert result.returncode != 0
    # input file, log and stdout capture are gone
    assert os.listdir(tmp_path / "run") == []


def test_real_run_reports_expired_url_and_retry_after(lab_hub, aria2c, tmp_path):
    dummy, entry = _lfs_entry(lab_hub, "gpufleet-lab/Kimi-K2.6-mini", "model-00002-of-000004.safetensors")
    sha = entry["lfs"]["sha256"]
    lab_hub.faults({"server": "cdn", "status": 429, "retry_after": 4})
    url = _signed(lab_hub, sha)
    files = [_aria2.Aria2File("f", url, str(tmp_path), "f", sha, entry["size"])]
    result = _aria2.run(files, str(tmp_path / "run"), aria2c=aria2c)
    assert result.outcomes["f"].status == "ERR"
    assert result.outcomes["f"].http_status == 429
    assert result.retry_after == 4
    lab_hub.faults()
    expired = url.replace("exp=", "exp=1").split("&sig=")[0] + "&sig=" + "0" * 64
    result = _aria2.run([files[0]._replace(url=expired)], str(tmp_path / "run"), aria2c=aria2c)
    assert result.outcomes["f"].http_status == 403
