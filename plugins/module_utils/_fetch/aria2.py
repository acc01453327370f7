# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Running aria2c over many files: the input file, the command line, and what came of it.

Private to the collection: not a public API, may change without notice.

aria2c gets everything per file in an input file (mode 0600, removed afterwards): the URL, out=,
dir=, a gid we chose (so the "Download Results" table maps back to our files) and, for LFS files,
checksum=sha-256=. Its argv carries only tuning, never a URL or a secret: a signed URL in argv would
show in ``ps`` to every user of the host. Per-file outcomes come from the results table and from
the log (error code and message per URI, "Checksum error detected. file=..."); the log is kept at
info level because that is where aria2 writes response headers, the only place a server's
Retry-After shows up (aria2 itself ignores it).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

# aria2's exit codes (its man page, "EXIT STATUS"), in the words an operator needs.
EXIT_CODES = {
    0: "all downloads completed",
    1: "an unknown error occurred",
    2: "timed out",
    3: "resource not found (404 on the server)",
    4: "aria2 saw 'resource not found' too many times (--max-file-not-found)",
    5: "download too slow (--lowest-speed-limit)",
    6: "network problem",
    7: "interrupted: unfinished downloads remained (signal or shutdown)",
    8: "the server does not support resume where it was needed",
    9: "not enough disk space",
    10: "piece length differs from the .aria2 control file",
    11: "aria2 was already downloading the same file",
    13: "the file already exists (auto-renaming is off)",
    14: "renaming the file failed",
    15: "could not open an existing file",
    16: "could not create a new file or truncate an existing one",
    17: "file I/O error",
    18: "could not create a directory",
    19: "name resolution failed",
    20: "could not parse a metalink document",
    21: "FTP command failed",
    22: "bad HTTP response (the server answered with an error status)",
    23: "too many redirects",
    24: "HTTP authorization failed",
    25: "could not parse a bencoded file",
    26: "a .torrent file is corrupted or misses information",
    27: "bad magnet URI",
    28: "bad or unrecognised option",
    29: "the remote server is temporarily overloaded or in maintenance",
    30: "could not parse a JSON-RPC request",
    31: "reserved",
    32: "checksum verification failed",
}

# Seconds aria2c gets to stop on SIGTERM (saving its control files) before it is killed.
STOP_WAIT = 10.0
# gids are 16 hex digits; the results table shows only the first 6, so those carry the index.
GID_WIDTH = 6

# mirrors: more URIs of the same bytes (peers), tab-separated on the URI line; header: sent to those
# URIs only (a peer's Authorization), in the input file, never on argv.
Aria2File = collections.namedtuple("Aria2File", ["key", "url", "dir", "out", "sha256", "size", "mirrors", "header"],
                                   defaults=((), None))
# status: "OK", "ERR", "INPR" (still running when aria2 stopped), "RM" or "missing" (not in the table)
FileOutcome = collections.namedtuple("FileOutcome", ["status", "code", "message", "http_status"])
# uri_errors: {uri: (code, message, http status)} of every URI that failed at least once (a mirror aria2
# gave up on while another finished the file too), so the caller can drop a bad peer.
RunResult = collections.namedtuple("RunResult", ["returncode", "meaning", "outcomes", "retry_after", "stdout_tail",
                                                 "uri_errors"], defaults=({},))


@dataclasses.dataclass(frozen=True)
class Aria2Settings:
    """How aria2c runs: its path, the proxy (in its input file) and its tuning (on its argv)."""

    aria2c: str
    connections: int
    splits: int
    parallel_files: int
    min_split_size: str
    timeout: int
    retry_wait: int
    validate_certs: bool
    ca_path: str | None
    # A proxy URL may carry credentials: never in a repr (tracebacks, test failures).
    proxy: str | None = dataclasses.field(repr=False)

    def tuning(self) -> dict[str, Any]:
        """build_argv's tuning keywords."""
        return {key: value for key, value in dataclasses.asdict(self).items() if key not in ("aria2c", "proxy")}


class Aria2Error(Exception):
    """aria2c could not be started at all."""


def explain(code):
    return EXIT_CODES.get(code, "aria2c exit code %s" % code)


def gid_for(index):
    return ("%0*x" % (GID_WIDTH, index + 1)).ljust(16, "0")


def render_input(files, proxy=None):
    """The input-file text for ``files`` (Aria2File list); gid i+1 for files[i].

    A proxy goes here per file rather than on argv: its URL may carry credentials.
    """
    lines = []
    for index, item in enumerate(files):
        uris = (item.url,) + tuple(item.mirrors or ())
        for bad in ("\n", "\r"):
            if any(bad in text for text in uris + (item.out, item.dir, item.header or "")):
                raise ValueError("newline in a URL, path or header cannot go into an aria2 input file: %r" % item.out)
        if any("\t" in uri for uri in uris):
            raise ValueError("tab in a URL cannot go into an aria2 input file: %r" % item.out)
        lines.append("\t".join(uris))
        lines.append("  dir=%s" % item.dir)
        lines.append("  out=%s" % item.out)
        lines.append("  gid=%s" % gid_for(index))
        if item.sha256:
            lines.append("  checksum=sha-256=%s" % item.sha256)
        if item.header:
            lines.append("  header=%s" % item.header)
            # a peer's header must never reach a proxy: peers are on the cluster network
            lines.append("  no-proxy=%s" % ",".join(sorted({_host_of(uri) for uri in uris})))
        elif proxy:
            lines.append("  all-proxy=%s" % proxy)
    return "\n".join(lines) + "\n"


def _host_of(uri):
    host = urllib.parse.urlsplit(uri).hostname or ""
    return host


def write_input(path, text):
    """Create ``path`` with mode 0600 from the start (never briefly world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)  # O_CREAT's mode does not apply to a file that already existed


def build_argv(aria2c: str, input_file: str, log_file: str, *, connections: int, splits: int, parallel_files: int,
               min_split_size: str, timeout: int, retry_wait: int, validate_certs: bool, ca_path: str | None) -> list[str]:
    """aria2c's argv: tuning only, no URL, no header, no secret."""
    argv = [
        aria2c,
        "--input-file=%s" % input_file,
        "--continue=true",
        "--auto-file-renaming=false",
        "--allow-overwrite=false",
        # none: no time lost preallocating 9 GB shards, and allocated blocks then measure progress
        "--file-allocation=none",
        # a SIGKILL loses at most this many seconds of progress (default 60)
        "--auto-save-interval=1",
        "--max-connection-per-server=%d" % min(16, max(1, connections)),
        "--split=%d" % max(1, splits),
        "--max-concurrent-downloads=%d" % max(1, parallel_files),
        "--min-split-size=%s" % min_split_size,
        "--timeout=%d" % timeout,
        "--connect-timeout=30",
        # aria2 retries 502/503 and network errors itself only with a non-zero wait
        "--max-tries=5",
        "--retry-wait=%d" % max(1, retry_wait),
        "--check-certificate=%s" % ("true" if validate_certs else "false"),
        # no periodic progress lines in its stdout: progress is measured from the staging files
        "--summary-interval=0",
        "--download-result=full",
        "--enable-color=false",
        "--console-log-level=warn",
        "--log=%s" % log_file,
        "--log-level=info",
        "--human-readable=false",
        "--uri-selector=inorder",
        "--remote-time=false",
        "--conditional-get=false",
        "--always-resume=true",
        "--max-resume-failure-tries=0",
        # aria2 follows a .torrent or metalink answer by default (downloading what it names, seeding
        # a torrent): a hostile mirror or CDN must only ever get its bytes hashed and refused.
        "--follow-torrent=false",
        "--follow-metalink=false",
        "--stop-with-process=%d" % os.getpid(),
    ]
    if ca_path:
        argv.append("--ca-certificate=%s" % ca_path)
    return argv


_RESULT_ROW = re.compile(r"^([0-9a-f]{%d})\|(OK|ERR|INPR|RM)\s*\|" % GID_WIDTH)
_EXC = re.compile(r"errorCode=(\d+) URI=(\S+)")
_CAUSE = re.compile(r"^\s*->\s*\[[^\]]*\]\s*errorCode=(\d+)\s*(.*)$")
_STATUS = re.compile(r"status=(\d{3})")
_CHECKSUM = re.compile(r"Checksum error detected\. file=(.+)$")
_RETRY_AFTER = re.compile(r"^Retry-After:\s*(\S.*)$", re.I)


def parse_results(stdout):
    """{gid prefix: status} from aria2's "Download Results" table."""
    status = {}
    for line in stdout.splitlines():
        match = _RESULT_ROW.match(line.strip())
        if match:
            status[match.group(1)] = match.group(2)
    return status


def parse_log(text):
    """(errors by URI {uri: (code, message, http status)}, checksum-failed paths, max Retry-After s)."""
    errors = {}
    checksum_failed = set()
    retry_after = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = _EXC.search(line)
        if match:
            code, uri = int(match.group(1)), match.group(2)
            message = ""
            # the cause chain follows on the next lines; the innermost cause is the useful one
            for follow in lines[i + 1:i + 6]:
                cause = _CAUSE.match(follow)
                if not cause:
                    break
                code, message = int(cause.group(1)), cause.group(2).strip()
            status = _STATUS.search(message)
            errors[uri] = (code, message or explain(code), int(status.group(1)) if status else None)
            continue
        match = _CHECKSUM.search(line)
        if match:
            checksum_failed.add(match.group(1).strip())
            continue
        match = _RETRY_AFTER.match(line.strip())
        if match:
            value = match.group(1).strip()
            if value.isdigit():
                retry_after = max(retry_after or 0, int(value))
    return errors, checksum_failed, retry_after


def _read(path):
    try:
        with open(path, "r", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


_COMPLETE = re.compile(r"\[NOTICE\] \[[^\]]*\] Download complete: (.+)$")


class _LogTail(object):
    """Reads what aria2 appended to its log since the last call (whole lines only)."""

    def __init__(self, path):
        self.path = path
        self.offset = 0
        self.rest = b""

    def lines(self):
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return []
        self.offset += len(data)
        data = self.rest + data
        cut = data.rfind(b"\n") + 1
        self.rest = data[cut:]
        return data[:cut].decode("utf-8", "replace").splitlines()


def completed_paths(lines):
    """Paths of the downloads aria2 reports finished in these log lines.

    aria2 logs "Download complete: PATH" after it closed the file (its disk cache flushed) and
    before it removes the control file; it does not write to that file again.
    """
    found = []
    for line in lines:
        match = _COMPLETE.search(line)
        if match:
            found.append(match.group(1).strip())
    return found


class _Completions(object):
    """Hands each file aria2's log reports finished to ``on_complete(key)``, once it is in the log."""

    def __init__(self, files: Sequence[Aria2File], log_file: str, on_complete: Callable[[str], None] | None) -> None:
        self.on_complete = on_complete
        self.by_path = {os.path.join(item.dir, item.out): item.key for item in files}
        self.tail = _LogTail(log_file)

    def report(self) -> None:
        if self.on_complete is None:
            return
        for path in completed_paths(self.tail.lines()):
            if path in self.by_path:
                self.on_complete(self.by_path[path])


def _start(argv: list[str], out_file: str) -> subprocess.Popen:
    """aria2c with its stdout and stderr in ``out_file``; Aria2Error when it cannot be started."""
    fd = os.open(out_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    # umask 077 (inherited by aria2c): its log, which holds response headers, is 0600 too
    old_umask = os.umask(0o077)
    try:
        return subprocess.Popen(  # pylint: disable=consider-using-with
            argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=subprocess.STDOUT, close_fds=True,
        )
    except OSError as exc:
        raise Aria2Error("cannot run %s: %s" % (argv[0], exc))
    finally:
        os.umask(old_umask)
        os.close(fd)


def _watch(proc: subprocess.Popen, completions: _Completions, *, tick: Callable[[], Any] | None,
           tick_interval: float, poll_interval: float, poll: Callable[[], Any] | None = None) -> None:
    """Wait for aria2c to exit, reporting completed files and calling ``poll`` (every ``poll_interval``)
    and ``tick`` on the way."""
    next_tick = time.monotonic() + tick_interval
    while True:
        wait = next_tick - time.monotonic()
        if completions.on_complete is not None or poll is not None:
            wait = min(poll_interval, wait)
        try:
            proc.wait(timeout=max(0.01, wait))
            completions.report()
            return
        except subprocess.TimeoutExpired:
            pass
        completions.report()
        if poll is not None:
            poll()
        if time.monotonic() >= next_tick:
            next_tick = time.monotonic() + tick_interval
            if tick is not None:
                tick()


def _outcomes(files: Sequence[Aria2File], returncode: int, stdout: str, log_text: str) -> RunResult:
    """Each file's outcome from the results table and the log, the exit code standing in where they say nothing."""
    table = parse_results(stdout)
    errors, checksum_failed, retry_after = parse_log(log_text + "\n" + stdout)
    outcomes = {}
    for index, item in enumerate(files):
        status = table.get(gid_for(index)[:GID_WIDTH], "missing")
        code, message, http_status = errors.get(item.url, (None, None, None))
        if os.path.join(item.dir, item.out) in checksum_failed:
            code, message = 32, "sha256 of the downloaded bytes does not match the Hub's"
        if status != "OK" and code is None:
            code = returncode if returncode not in (0, None) else None
            message = explain(code) if code is not None else "aria2 stopped before this file finished"
        outcomes[item.key] = FileOutcome(status, code, message, http_status)
    tail = "\n".join(line for line in stdout.splitlines()[-20:])
    return RunResult(returncode, explain(returncode), outcomes, retry_after, tail, errors)


def _stop(proc: subprocess.Popen) -> None:
    """aria2c asked to stop (it saves its control files on SIGTERM), killed if it does not."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Aria2Run(object):
    """One aria2c over ``files``, started at once and left to run: ``poll`` it, then ``finish`` it.

    What ``run`` does in one call, in steps, so a caller can keep several going at once (a peer source's
    lanes: rounds.Round starts one per look that started files, as slots free). ``name`` tells the runs of one ``workdir``
    apart: ``<name>-input.txt``, ``<name>.log`` and ``<name>.out``, all removed by ``finish`` or ``stop``.
    """

    def __init__(self, files: Sequence[Aria2File], workdir: str, settings: Aria2Settings, *,
                 on_complete: Callable[[str], None] | None = None, name: str = "aria2") -> None:
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        self.files = list(files)
        self.input_file = os.path.join(workdir, "%s-input.txt" % name)
        self.log_file = os.path.join(workdir, "%s.log" % name)
        self.out_file = os.path.join(workdir, "%s.out" % name)
        for leftover in (self.log_file, self.out_file):
            if os.path.exists(leftover):
                os.unlink(leftover)
        write_input(self.input_file, render_input(self.files, proxy=settings.proxy))
        argv = build_argv(settings.aria2c, self.input_file, self.log_file, **settings.tuning())
        try:
            self.proc = _start(argv, self.out_file)
        except BaseException:
            self._clean()
            raise
        self.completions = _Completions(self.files, self.log_file, on_complete)

    def poll(self) -> bool:
        """Reports the files aria2's log says are complete (``on_complete``); True once aria2c has exited."""
        ended = self.proc.poll() is not None
        self.completions.report()
        return ended

    def finish(self) -> RunResult:
        """Once ``poll`` said it ended: each file's outcome; its input, log and output files are removed."""
        self.proc.wait()
        self.completions.report()
        try:
            stdout = _read(self.out_file)
            log_text = _read(self.log_file)
        finally:
            self._clean()
        return _outcomes(self.files, self.proc.returncode, stdout, log_text)

    def stop(self) -> None:
        """aria2c stopped (SIGTERM: its control files saved for the next run) and its files removed."""
        try:
            _stop(self.proc)
        finally:
            self._clean()

    def _clean(self) -> None:
        for path in (self.input_file, self.log_file, self.out_file):
            try:
                os.unlink(path)
            except OSError:
                pass


def run(files: Sequence[Aria2File], workdir: str, settings: Aria2Settings, *, tick: Callable[[], Any] | None = None,
        tick_interval: float = 2.0, on_complete: Callable[[str], None] | None = None,
        poll: Callable[[], Any] | None = None, poll_interval: float = 0.1) -> RunResult:
    """Fetch ``files`` (Aria2File) with one aria2c; returns RunResult with an outcome per file key.

    ``workdir`` (ours, mode 0700) holds the input file, aria2's stdout and log, all removed before
    returning. ``tick()`` is called every ``tick_interval`` s while aria2 runs (progress);
    ``on_complete(key)`` as soon as aria2's log says a file finished (every ``poll_interval`` s), so
    the caller can hash it while the others still download; ``poll()`` every ``poll_interval`` s while
    aria2 runs, after the completions (the caller places the files whose hash is done). What any of
    them raises stops aria2c (its partials and control files stay for the next run) and is raised.
    """
    one = Aria2Run(files, workdir, settings, on_complete=on_complete)
    try:
        _watch(one.proc, one.completions, tick=tick, tick_interval=tick_interval, poll_interval=poll_interval, poll=poll)
    except BaseException:
        one.stop()  # not left running (it would write on into staging) behind the caller's error
        raise
    return one.finish()
