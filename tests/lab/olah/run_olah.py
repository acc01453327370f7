"""Run olah (a third-party Hugging Face mirror, pinned in requirements/olah.txt) offline on loopback.

olah serves the lab's fixture git repos through its "local mirror" mode, so the collection can be
tested against a Hub implementation that is not our own. It runs from its own venv
(``$GPUFLEET_LAB_CACHE/olah-venv``) because its dependency pins must not touch the controller venv,
and it can never reach huggingface.co: offline mode is on and its upstream points at a loopback
port that we hold bound but never listen on (connection refused, instantly).

Known limits of olah 0.5.4 handled here (see tests/lab/tests/test_olah.py for the assertions):
- repo info without a revision and 404s for files missing from the mirror need two cache entries
  that an online olah would have fetched from upstream: ``revision/main/meta_head.json`` and
  ``revision/main/meta_get.json`` (+ ``.body``), seeded below from the fixture store (without them:
  401 "Repository not found");
- it reads whole files into memory: only small fixture repos are mirrored (never throughput-1g).

Usage:  python tests/lab/olah/run_olah.py [--cache DIR] [--port N] [--repo ORG/NAME ...] [--ready-file F]
        (serves until Ctrl-C or --seconds elapse; once olah answers, prints "olah VERSION serving
        on URL ..." and writes {"url", "workdir", "version", "pid"} to the ready file: start it
        with tests/lab/ready.py)
        from run_olah import start_olah; with start_olah() as olah: olah.url
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Iterable, Optional

HERE = pathlib.Path(__file__).resolve().parent
LAB = HERE.parent
REPO_ROOT = LAB.parent.parent
REQUIREMENTS = REPO_ROOT / "requirements" / "olah.txt"
OLAH_VERSION = "0.5.4"

sys.path.insert(0, str(LAB))

import fixtures  # noqa: E402
import ready  # noqa: E402

DEFAULT_REPOS = (fixtures.TARGET, fixtures.DRAFTER, fixtures.GATED)
# olah reads every file it serves whole into memory: keep it to the small fixtures.
MAX_MIRRORED_FILE = 64 << 20


class OlahError(RuntimeError):
    pass


def _venv_python(cache: pathlib.Path) -> pathlib.Path:
    return cache / "olah-venv" / "bin" / "python"


def _has_pinned_olah(python: pathlib.Path) -> bool:
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('olah'))"],
        capture_output=True, text=True, check=False,
    )
    return probe.returncode == 0 and probe.stdout.strip() == OLAH_VERSION


def ensure_olah_venv(cache: pathlib.Path) -> pathlib.Path:
    """Create ``<cache>/olah-venv`` with the pinned olah unless it already has that version.

    One process at a time (an exclusive lock on ``<cache>/.olah-venv.lock``): each pytest-xdist worker
    that runs an olah test starts its own olah, and on a fresh machine the first ones used to remove and
    create the venv at once, so that one's ``ensurepip`` ran in a directory another had just removed.
    The ones that wait find the venv made and use it. A venv left half-made (a killed run) fails the
    version probe and is made again."""
    python = _venv_python(cache)
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".olah-venv.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _has_pinned_olah(python):
            return python
        venv_dir = python.parent.parent
        shutil.rmtree(venv_dir, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv_dir)], check=True)
        result = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "-r", str(REQUIREMENTS)],
            capture_output=True, text=True, check=False,
        )
        if result.returncode != 0:
            raise OlahError(f"pip install -r {REQUIREMENTS} failed:\n{result.stderr[-2000:]}")
    return python


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class UpstreamSentinel:
    """Stands in for huggingface.co: a loopback listener that counts and drops every connection.

    olah is configured offline, so it should never connect; if it does, the connection fails at
    once (no hang) and ``connections`` says so. The accept loop ends when the socket closes.
    """

    def __init__(self, host: str) -> None:
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.5)
        self.netloc = f"{host}:{self.sock.getsockname()[1]}"
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="olah-upstream-sentinel",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def _seed_revision_cache(repos_path: pathlib.Path, root: pathlib.Path, repo_id: str,
                         revisions: Iterable[str]) -> None:
    """Write the revision-metadata cache entries an online olah would have fetched upstream.

    Offline, olah 0.5.4 answers ``/api/models/<repo>`` (no revision) and 404s for missing files
    only from ``revision/main/meta_head.json`` (plain ``{"sha", "lastModified"}``) and
    ``revision/main/meta_get.json`` (an HTTP cache envelope whose body, in ``meta_get.json.body``,
    is the Hub's /revision/main JSON). Without them both answer 401 "Repository not found".
    Other refs and commit shas resolve from the git repo directly and need no entry.
    """
    repo = json.loads((root / "store" / repo_id / "repo.json").read_text())
    refs = dict(repo["refs"]["branches"])
    refs.update(repo["refs"]["tags"])
    for name in revisions:
        sha = refs.get(name, name)
        commit = repo["commits"][sha]
        d = repos_path / "api" / "models" / repo_id / "revision" / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "meta_head.json").write_text(json.dumps({"sha": sha, "lastModified": commit["date"]}))
        envelope = {"status_code": 200, "headers": {"content-type": "application/json"},
                    "cached_at": time.time()}
        body = {"id": repo_id, "sha": sha, "lastModified": commit["date"], "private": False,
                "gated": "auto" if repo["gated"] else False,
                "siblings": [{"rfilename": f["path"]} for f in commit["files"]]}
        (d / "meta_get.json").write_text(json.dumps(envelope))
        (d / "meta_get.json.body").write_bytes(json.dumps(body).encode())


class OlahServer:
    def __init__(self, proc: subprocess.Popen, url: str, workdir: pathlib.Path,
                 upstream: UpstreamSentinel, log: pathlib.Path, keep_workdir: bool) -> None:
        self.proc = proc
        self.url = url
        self.workdir = workdir
        self.log = log
        self.upstream = upstream
        self.keep_workdir = keep_workdir

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        ready.stop(self.proc, timeout=timeout)
        self.upstream.close()
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "OlahServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_olah(cache_dir: Optional[os.PathLike] = None, port: int = 0,
               repos: Iterable[str] = DEFAULT_REPOS, host: str = "127.0.0.1",
               startup_timeout: float = 60.0, workdir: Optional[os.PathLike] = None,
               seed_revisions: Iterable[str] = ("main",),
               keep_workdir: bool = False) -> OlahServer:
    """Start olah serving the fixture git repos; return once it answers on ``.url``."""
    cache = pathlib.Path(cache_dir) if cache_dir else fixtures.default_cache_dir()
    python = ensure_olah_venv(cache)
    root = fixtures.ensure_fixtures(cache)
    port = port or _free_port(host)
    work = pathlib.Path(workdir) if workdir else cache / "olah-run" / str(port)
    shutil.rmtree(work, ignore_errors=True)
    mirrors = work / "mirrors" / "models"
    repos_path = work / "repos"
    logs = work / "logs"
    for d in (mirrors, repos_path, logs):
        d.mkdir(parents=True, exist_ok=True)
    for repo_id in repos:
        store = root / "store" / repo_id / "repo.json"
        if not store.exists():
            raise OlahError(f"no fixture repo {repo_id} in {root}")
        sizes = [f["size"] for c in json.loads(store.read_text())["commits"].values()
                 for f in c["files"]]
        if max(sizes) > MAX_MIRRORED_FILE:
            raise OlahError(f"{repo_id} has files over {MAX_MIRRORED_FILE} bytes; olah reads "
                            "each file whole into memory, so it is not mirrored")
        link = mirrors / repo_id
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(root / "git" / repo_id)
        _seed_revision_cache(repos_path, root, repo_id, seed_revisions)

    upstream = UpstreamSentinel(host)
    upstream_netloc = upstream.netloc
    config = work / "olah.toml"
    config.write_text(
        "[basic]\n"
        f'host = "{host}"\nport = {port}\n'
        f'repos-path = "{repos_path}"\n'
        f'mirrors-path = ["{work / "mirrors"}"]\n'
        'hf-scheme = "http"\n'
        f'hf-netloc = "{upstream_netloc}"\nhf-lfs-netloc = "{upstream_netloc}"\n'
        'mirror-scheme = "http"\n'
        f'mirror-netloc = "{host}:{port}"\nmirror-lfs-netloc = "{host}:{port}"\n'
        # Our seeded revision cache must never count as stale.
        "metadata-cache-ttl = 315360000\n"
        "[accessibility]\noffline = true\n"
    )
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "hf_endpoint", "hf_token")}
    env["NO_PROXY"] = env["no_proxy"] = "*"
    env["HF_HUB_OFFLINE"] = "1"
    log = logs / "stdout.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(python), "-m", "olah.server", "--config", str(config), "--log-path", str(logs)],
            cwd=work, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    server = OlahServer(proc, f"http://{host}:{port}", work, upstream, log, keep_workdir)
    probe = f"{server.url}/api/models/{next(iter(repos), fixtures.TARGET)}/refs"
    # olah is third-party (no --ready-file): ready means it answers the first repo's refs.
    try:
        ready.wait_until(lambda: _answers(probe), alive=proc, what=f"olah (waiting for {probe})",
                         timeout=startup_timeout, log=log)
    except ready.NotReady as exc:
        server.stop()
        raise OlahError(str(exc)) from None
    return server


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--cache", help="lab cache dir (default $GPUFLEET_LAB_CACHE)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: free)")
    parser.add_argument("--repo", action="append", help="repo to mirror (default: the small fixtures)")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0: Ctrl-C)")
    parser.add_argument("--keep-workdir", action="store_true", help="keep config, cache and logs")
    parser.add_argument("--ready-file", help="write the ready JSON here once olah answers")
    args = parser.parse_args(argv)
    # SIGINT and SIGTERM both stop olah (its own session: nothing else would) and the sentinel.
    # SIGINT is set explicitly: a child of a process that ignores it (a pytest-xdist worker)
    # inherits "ignored", and Python then leaves it so.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        server = start_olah(args.cache, args.port, args.repo or DEFAULT_REPOS,
                            keep_workdir=args.keep_workdir)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        print(f"run_olah: error: {exc}", file=sys.stderr)
        return 1
    print(f"olah {OLAH_VERSION} serving on {server.url} (HF_ENDPOINT={server.url}); "
          f"workdir {server.workdir}", flush=True)
    if args.ready_file:
        ready.write(args.ready_file, {"url": server.url, "workdir": str(server.workdir),
                                      "version": OLAH_VERSION, "pid": os.getpid()})
    try:
        if args.seconds:
            time.sleep(args.seconds)
        else:
            while server.proc.poll() is None:
                time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    if server.upstream.connections:
        print(f"run_olah: olah tried to reach its upstream {server.upstream.connections} times",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
