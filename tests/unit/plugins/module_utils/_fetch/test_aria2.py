# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_aria2: input file, argv, result parsing, a run against a stand-in aria2c, and real aria2c runs
against the lab Hub."""
from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import urllib.request

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import aria2 as _aria2
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import settings as _snapshot_settings

SHA = "ab" * 32


def settings(**overrides):
    """Aria2Settings with the tuning hf_snapshot gives aria2 by default (its argument spec), overlaid."""
    s = _snapshot_settings.Settings.from_params({"repo_id": "org/name", "dest": "/d"})
    values = dict(aria2c="aria2c", connections=s.connections, splits=s.splits, parallel_files=s.parallel_files,
                  min_split_size=s.min_split_size, timeout=s.timeout, retry_wait=s.retry_wait,
                  validate_certs=s.validate_certs, ca_path=s.ca_path, proxy=s.proxy)
    values.update(overrides)
    return _aria2.Aria2Settings(**values)


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
    tuning = settings(connections=16, splits=16, parallel_files=6, min_split_size="20M").tuning()
    argv = _aria2.build_argv("aria2c", "/d/in.txt", "/d/log", **tuning)
    joined = " ".join(argv)
    assert "http" not in joined and "header" not in joined and "Authorization" not in joined
    for expected in ("--continue=true", "--auto-file-renaming=false", "--auto-save-interval=1",
                     "--follow-torrent=false", "--follow-metalink=false",
                     "--max-connection-per-server=16", "--split=16", "--max-concurrent-downloads=6",
                     "--min-split-size=20M", "--input-file=/d/in.txt"):
        assert expected in argv
    # aria2 caps -x at 16
    assert "--max-connection-per-server=16" in _aria2.build_argv("aria2c", "i", "l", **settings(connections=64).tuning())


def default_argv(aria2c, workdir):
    """aria2c's argv for hf_snapshot's default tuning, as it was before the tuning became Aria2Settings."""
    return [
        aria2c, "--input-file=%s/aria2-input.txt" % workdir, "--continue=true", "--auto-file-renaming=false",
        "--allow-overwrite=false", "--file-allocation=none", "--auto-save-interval=1", "--max-connection-per-server=16",
        "--split=16", "--max-concurrent-downloads=6", "--min-split-size=8M", "--timeout=60", "--connect-timeout=30",
        "--max-tries=5", "--retry-wait=2", "--check-certificate=true", "--summary-interval=0", "--download-result=full",
        "--enable-color=false", "--console-log-level=warn", "--log=%s/aria2.log" % workdir, "--log-level=info",
        "--human-readable=false", "--uri-selector=inorder", "--remote-time=false", "--conditional-get=false",
        "--always-resume=true", "--max-resume-failure-tries=0", "--follow-torrent=false", "--follow-metalink=false",
        "--stop-with-process=%d" % os.getpid(),
    ]


def test_argv_for_the_default_tuning_is_unchanged():
    assert _aria2.build_argv("aria2c", "/w/aria2-input.txt", "/w/aria2.log", **settings().tuning()) == default_argv(
        "aria2c", "/w")
    # the options that change it: certificates, a CA, the tuning; the proxy never goes on argv
    argv = _aria2.build_argv("/bin/a2", "/w/in", "/w/log", **settings(
        validate_certs=False, ca_path="/ca.pem", connections=0, splits=0, parallel_files=0, retry_wait=0,
        proxy="http://u:p@proxy:3128").tuning())
    assert argv[0] == "/bin/a2" and argv[-1] == "--ca-certificate=/ca.pem"
    for expected in ("--check-certificate=false", "--max-connection-per-server=1", "--split=1",
                     "--max-concurrent-downloads=1", "--retry-wait=1"):
        assert expected in argv
    assert not any("proxy" in arg for arg in argv)


def test_input_file_for_the_default_tuning_is_unchanged():
    files = [
        _aria2.Aria2File("k1", "http://cdn/a?sig=1", "/d/s", "k1", SHA, 10),
        _aria2.Aria2File("k2", "http://hub/b", "/d/s", "k2", None, 5),
    ]
    assert _aria2.render_input(files, proxy=settings().proxy) == (
        "http://cdn/a?sig=1\n  dir=/d/s\n  out=k1\n  gid=0000010000000000\n  checksum=sha-256=%s\n"
        "http://hub/b\n  dir=/d/s\n  out=k2\n  gid=0000020000000000\n" % SHA)


# A stand-in for aria2c: records its argv and input file, reports the first file complete in its log,
# fails the second (404), never mentions the third, and exits with the code given.
STAND_IN = """#!%(python)s
import json, sys
opts = dict(arg[2:].split("=", 1) for arg in sys.argv[1:])
with open(opts["input-file"]) as handle:
    text = handle.read()
with open(%(capture)r, "w") as handle:
    json.dump({"argv": sys.argv, "input": text}, handle)
with open(opts["log"], "a") as log:
    log.write("2026-12-02 14:16:02.44 [NOTICE] [RequestGroup.cc:1214] Download complete: %(first)s\\n")
    log.write("Exception: [AbstractCommand.cc:351] errorCode=3 URI=http://hub/b\\n")
print("000001|OK  |   3.1MiB/s|100|%(first)s")
print("000002|ERR |       0B/s|  -|/d/s/k2")
sys.exit(%(code)d)
"""


def stand_in(tmp_path, code):
    staging = tmp_path / "staging"
    staging.mkdir()
    capture = tmp_path / "capture.json"
    script = tmp_path / "aria2c"
    script.write_text(STAND_IN % {"python": sys.executable, "capture": str(capture),
                                  "first": str(staging / "k1"), "code": code})
    os.chmod(script, 0o755)
    return str(script), str(staging), capture


def three_files(staging):
    return [
        _aria2.Aria2File("k1", "http://cdn/a?sig=1", staging, "k1", SHA, 10),
        _aria2.Aria2File("k2", "http://hub/b", staging, "k2", None, 5),
        _aria2.Aria2File("k3", "http://hub/c", staging, "k3", None, 5),
    ]


def test_run_passes_the_default_argv_and_input_file_and_reads_the_outcomes(tmp_path):
    aria2c, staging, capture = stand_in(tmp_path, 3)
    files = three_files(staging)
    completed = []
    workdir = str(tmp_path / "run")
    result = _aria2.run(files, workdir, settings(aria2c=aria2c), on_complete=completed.append)
    seen = json.loads(capture.read_text())
    assert seen["argv"] == default_argv(aria2c, workdir)
    assert seen["input"] == _aria2.render_input(files)
    assert completed == ["k1"]
    assert result.returncode == 3 and result.meaning == _aria2.explain(3)
    assert result.outcomes["k1"] == _aria2.FileOutcome("OK", None, None, None)
    assert result.outcomes["k2"] == _aria2.FileOutcome("ERR", 3, _aria2.explain(3), None)
    # not in the results table: the exit code stands in
    assert result.outcomes["k3"] == _aria2.FileOutcome("missing", 3, _aria2.explain(3), None)
    assert "000002|ERR" in result.stdout_tail and result.retry_after is None
    assert os.listdir(workdir) == []


def test_run_without_an_exit_code_to_blame(tmp_path):
    aria2c, staging, capture = stand_in(tmp_path, 0)
    files = three_files(staging)
    result = _aria2.run(files, str(tmp_path / "run"), settings(aria2c=aria2c, proxy="http://u:p@proxy:3128"))
    seen = json.loads(capture.read_text())
    assert seen["input"] == _aria2.render_input(files, proxy="http://u:p@proxy:3128")
    assert seen["input"].count("  all-proxy=http://u:p@proxy:3128\n") == 3
    assert not any("proxy" in arg for arg in seen["argv"])
    assert result.returncode == 0 and result.meaning == _aria2.explain(0)
    assert result.outcomes["k2"] == _aria2.FileOutcome("ERR", 3, _aria2.explain(3), None)  # from the log
    assert result.outcomes["k3"] == _aria2.FileOutcome("missing", None, "aria2 stopped before this file finished", None)


# A stand-in for aria2c that reports k1 complete, then runs until the caller says (a file its poll creates:
# an event, waited for in short naps) or forever without one; its pid in a file.
WAITING = """#!%(python)s
import os, sys, time
opts = dict(arg[2:].split("=", 1) for arg in sys.argv[1:])
with open(%(pid)r, "w") as handle:
    handle.write(str(os.getpid()))
with open(opts["log"], "a") as log:
    log.write("2026-12-02 14:16:02.44 [NOTICE] [RequestGroup.cc:1214] Download complete: %(first)s\\n")
while not os.path.exists(%(go)r):
    time.sleep(0.01)
print("000001|OK  |   3.1MiB/s|100|%(first)s")
"""


def waiting_stand_in(tmp_path):
    staging = tmp_path / "staging"
    staging.mkdir()
    script = tmp_path / "aria2c"
    pid, go = tmp_path / "pid", tmp_path / "go"
    script.write_text(WAITING % {"python": sys.executable, "pid": str(pid), "go": str(go), "first": str(staging / "k1")})
    os.chmod(script, 0o755)
    return str(script), str(staging), pid, go


def test_run_polls_the_caller_while_aria2c_runs(tmp_path):
    """poll(): the caller places what it verified while aria2c still runs (here: the poll that saw k1
    complete lets the stand-in end)."""
    aria2c, staging, pid, go = waiting_stand_in(tmp_path)
    completed, polls = [], []

    def poll():
        polls.append(list(completed))
        if completed:
            go.write_text("")

    result = _aria2.run(three_files(staging)[:1], str(tmp_path / "run"), settings(aria2c=aria2c),
                        on_complete=completed.append, poll=poll)
    assert result.outcomes["k1"].status == "OK" and polls[-1] == ["k1"]


def test_what_poll_raises_stops_aria2c_and_is_raised(tmp_path):
    aria2c, staging, pid, go = waiting_stand_in(tmp_path)
    completed = []

    def poll():
        if completed:
            raise _aria2.Aria2Error("the caller's error")

    workdir = tmp_path / "run"
    try:
        _aria2.run(three_files(staging)[:1], str(workdir), settings(aria2c=aria2c), on_complete=completed.append,
                   poll=poll)
    except _aria2.Aria2Error as exc:
        assert str(exc) == "the caller's error"
    else:
        raise AssertionError("poll's error must be raised")
    assert not go.exists() and os.listdir(workdir) == []
    try:
        os.kill(int(pid.read_text()), 0)
    except ProcessLookupError:
        pass  # stopped (and reaped), not left running into staging
    else:
        raise AssertionError("aria2c was left running")


def test_run_reports_an_aria2c_that_cannot_start(tmp_path):
    workdir = tmp_path / "run"
    try:
        _aria2.run([], str(workdir), settings(aria2c=str(tmp_path / "no-aria2c")))
    except _aria2.Aria2Error as exc:
        assert "cannot run %s" % (tmp_path / "no-aria2c") in str(exc)
    else:
        raise AssertionError("a missing aria2c must raise Aria2Error")
    assert os.listdir(workdir) == []


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
    result = _aria2.run(files, str(tmp_path / "run"),
                        settings(aria2c=aria2c, connections=4, splits=4, min_split_size="1M", parallel_files=2),
                        tick=lambda: ticks.append(1), tick_interval=0.2, on_complete=completed.append)
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
    result = _aria2.run(files, str(tmp_path / "run"), settings(aria2c=aria2c, parallel_files=2))
    assert result.outcomes["f"].status == "ERR"
    assert result.outcomes["f"].http_status == 429
    assert result.retry_after == 4
    lab_hub.faults()
    expired = url.replace("exp=", "exp=1").split("&sig=")[0] + "&sig=" + "0" * 64
    result = _aria2.run([files[0]._replace(url=expired)], str(tmp_path / "run"), settings(aria2c=aria2c, parallel_files=2))
    assert result.outcomes["f"].http_status == 403
