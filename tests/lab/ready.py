"""Start a lab server and wait until it is ready: the one helper for tests, benchmarks and labctl.

The lab's servers (hub/server.py, olah/run_olah.py, sglang_standin/gpufleet_lab_sglang.py) take
``--ready-file PATH``: once they listen they write their ready JSON there with ``write`` (a rename,
so a reader sees nothing or the whole document, never half a line).

    proc, info = ready.start([sys.executable, "tests/lab/hub/server.py", ...], ready_file=tmp / "hub.json")
    ...
    ready.stop(proc)

``start`` removes a stale ready file, runs the command with ``--ready-file`` appended (stdout and
stderr into a log file), then polls the ready file while watching the process: it fails at once,
with the tail of that log, when the process exits first, and after a generous timeout otherwise (a
guard against a hung server, never a measurement). ``wait_until`` is the same loop for a condition
of the caller's own (olah's first HTTP answer, a line in a log, a server that is not our child).

Standard library only and no imports from tests/lab: the unit tests, which cannot import tests/lab
as a package, load this file by path (tests/unit/plugins/lab_ready.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Callable, Optional, TypeVar, Union

POLL_SECONDS = 0.05
START_TIMEOUT = 120.0
STOP_TIMEOUT = 20.0  # the SGLang stand-in drains on SIGTERM as SGLang does: up to 2 x its 5 s poll when idle
LOG_TAIL = 3000

T = TypeVar("T")
PathLike = Union[str, "os.PathLike[str]"]
Alive = Union[subprocess.Popen, Callable[[], bool]]


class NotReady(RuntimeError):
    """The server exited before it was ready, or was not ready in time; the message has its log tail."""


def write(path: PathLike, info: dict) -> None:
    """Server side: ``info`` as JSON at ``path``, replaced in one rename."""
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(info, handle, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)


def read(path: PathLike) -> Optional[dict]:
    """The ready JSON at ``path``, or None while there is none."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def log_tail(path: Optional[PathLike], limit: int = LOG_TAIL) -> str:
    """The last ``limit`` bytes of a log file, as text ("" when there is none)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _exited(alive: Alive) -> Optional[str]:
    if isinstance(alive, subprocess.Popen):
        status = alive.poll()
        return None if status is None else f"exited with status {status}"
    return None if alive() else "exited"


def _with_log(message: str, log: Optional[PathLike]) -> str:
    tail = log_tail(log)
    return f"{message}; its log ({os.fspath(log)}):\n{tail}" if tail else message


def wait_until(check: Callable[[], Optional[T]], *, alive: Alive, what: str, timeout: float = START_TIMEOUT,
               log: Optional[PathLike] = None, interval: float = POLL_SECONDS) -> T:
    """Poll ``check()`` every ``interval`` s until it returns something other than None or False; returns that.

    ``alive`` is the process (or a callable saying whether it still runs). It is looked at after
    ``check``, so a server that got ready and exited at once still counts as ready; once it is
    gone, or ``timeout`` seconds have passed, NotReady is raised with the tail of ``log``.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        gone = _exited(alive)
        if gone:
            raise NotReady(_with_log(f"{what} {gone} before it was ready", log))
        if time.monotonic() >= deadline:
            raise NotReady(_with_log(f"{what} was not ready within {timeout:g} s", log))
        time.sleep(interval)


def wait(proc: subprocess.Popen, ready_file: PathLike, *, what: str, until: Optional[Callable[[dict], bool]] = None,
         timeout: float = START_TIMEOUT, log: Optional[PathLike] = None) -> dict:
    """The ready JSON ``proc`` wrote to ``ready_file``, once there (and once ``until(info)`` holds)."""
    def check() -> Optional[dict]:
        info = read(ready_file)
        return info if info is not None and (until is None or until(info)) else None

    return wait_until(check, alive=proc, what=what, timeout=timeout, log=log)


def default_log(ready_file: PathLike) -> str:
    return os.fspath(ready_file) + ".log"


def spawn(argv: list, *, ready_file: PathLike, log: Optional[PathLike] = None, **popen) -> subprocess.Popen:
    """Run ``argv --ready-file READY_FILE`` after removing a stale ready file; does not wait.

    stdout and stderr are appended to ``log`` (default: ``default_log(ready_file)``) unless
    ``popen`` redirects them itself; stdin is /dev/null unless given.
    """
    ready_file = os.fspath(ready_file)
    try:
        os.unlink(ready_file)
    except FileNotFoundError:
        pass
    popen.setdefault("stdin", subprocess.DEVNULL)
    with open(log if log is not None else default_log(ready_file), "ab") as out:
        popen.setdefault("stdout", out)
        popen.setdefault("stderr", subprocess.STDOUT if popen["stdout"] is out else out)
        # The caller owns the process (stop() or its own shutdown): it outlives this function.
        return subprocess.Popen([*map(str, argv), "--ready-file", ready_file], **popen)  # pylint: disable=consider-using-with


def start(argv: list, *, ready_file: PathLike, what: str, until: Optional[Callable[[dict], bool]] = None,
          timeout: float = START_TIMEOUT, log: Optional[PathLike] = None, **popen) -> tuple[subprocess.Popen, dict]:
    """``spawn`` then ``wait``: (process, ready JSON). When it is not ready the process is stopped and NotReady raised."""
    log = log if log is not None else default_log(ready_file)
    proc = spawn(argv, ready_file=ready_file, log=log, **popen)
    try:
        info = wait(proc, ready_file, what=what, until=until, timeout=timeout, log=log)
    except BaseException:
        stop(proc)
        raise
    return proc, info


def stop(proc: subprocess.Popen, *, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int:
    """Send ``sig`` (SIGKILL after ``timeout`` s), reap, close its pipes; returns the exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return proc.returncode
