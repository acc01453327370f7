"""Offline wheelhouse for the lab hosts (Debian bookworm, CPython 3.11, glibc 2.36, x86_64).

The hosts have no route out, like the air-gapped clusters the collection targets: every Python
package they get comes from wheels downloaded here, on the controller, which reaches PyPI.

  wheelhouse.py build [--cache DIR] [--force] [--find-links DIR ...]
      $CACHE/wheelhouse/tools/   requirements/hosts.txt and all its dependencies
      $CACHE/wheelhouse/tools.tar  the same wheels in one archive (what the lab's targets give the model role)
      $CACHE/wheelhouse/sglang/  requirements/sglang-host.txt (complete, pinned) + sglang --no-deps
      $CACHE/wheelhouse/router/  requirements/router-host.txt (complete, pinned): sglang-router 0.3.2
      A stamp keyed on the requirement files (and the target platform) makes a second run a no-op.
  wheelhouse.py verify [--cache DIR] [--set tools|sglang|router]
      Install each set into a throwaway venv with --no-index (in an empty network namespace when
      root) and import what the hosts need: proves the wheelhouse is offline-complete.
  wheelhouse.py install-sglang --python VENV/bin/python [--wheelhouse DIR]
  wheelhouse.py install-tools  --python VENV/bin/python [--wheelhouse DIR]
  wheelhouse.py install-router --python VENV/bin/python [--wheelhouse DIR]
      Offline install into that venv (created first if it does not exist).

Importable: install_commands(venv_python, wheelhouse_dir) for the rootfs builder, which runs the
commands inside the rootfs chroot (so every path in them is a path as seen from there).

Where SGLang 0.5.23 reads `--config FILE.yaml`: sglang/srt/server_args.py prepare_server_args()
builds `argparse.ArgumentParser`, calls `ServerArgs.add_cli_args(parser)`, then
`sglang.srt.utils.server_args_config_parser.ConfigArgumentMerger(parser).merge_config_with_args(argv)`
and `parser.parse_args(merged)`. The merger turns each YAML key into `--{key}` verbatim, so
`model_path:` becomes `--model_path`, which argparse rejects.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
REQ_DIR = REPO / "requirements"

# The hosts: Debian bookworm's python3 (3.11.2) and glibc 2.36. Wheels are chosen for that
# target explicitly, not for whatever this controller happens to run.
PYTHON_VERSION = "3.11"
ABI = "cp311"
GLIBC_MAX = 36
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC_MAX, 4, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64",
]
# Bump when the download recipe changes in a way that needs a rebuild.
BUILD_FORMAT = "1"
STAMP = ".stamp.json"
NODEPS_MARK = "# no-deps:"

SGLANG_CHECK = """\
import argparse
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser()
ServerArgs.add_cli_args(p)
a = p.parse_args(['--model-path', 'x', '--speculative-algorithm', 'DFLASH'])
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
print(SpeculativeAlgorithm.from_string('DFLASH'))
try:
    SpeculativeAlgorithm.from_string('DFLASHX')
except ValueError:
    print('DFLASHX rejected')
else:
    raise SystemExit('DFLASHX was accepted')
"""
TOOLS_CHECK = """\
import huggingface_hub, safetensors, jmespath
print('huggingface_hub', huggingface_hub.__version__)
print('safetensors', safetensors.__version__)
print('jmespath', jmespath.__version__, jmespath.search('a.b', {'a': {'b': 1}}))
"""

# The router's launcher and the Rust extension it drives: the same imports `launch_router` makes.
ROUTER_CHECK = """\
import importlib.metadata as m
from sglang_router.launch_router import parse_router_args
from sglang_router.router import Router
args = parse_router_args(['--host', '127.0.0.1', '--port', '30080', '--policy', 'cache_aware'])
print('sglang-router', m.version('sglang-router'), args.policy, Router.__name__)
"""


class WheelhouseError(Exception):
    """An expected failure: reported as one line, no traceback."""


def cache_dir() -> Path:
    return Path(os.environ.get("GPUFLEET_LAB_CACHE", os.path.expanduser("~/.cache/gpufleet-lab")))


def log(msg: str) -> None:
    print(f"[wheelhouse] {msg}", flush=True)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Requirements:
    path: Path
    pins: dict[str, str] = field(default_factory=dict)        # name -> version, from `name==v`
    other: list[str] = field(default_factory=list)            # lines that are not exact pins
    nodeps: list[str] = field(default_factory=list)           # `# no-deps: name==v` lines


def flatten_requirements(path: Path, _seen: tuple[Path, ...] = ()) -> str:
    """The file's text with every `-r other.txt` replaced by that file's (flattened) text.

    The copy that travels with the wheels must stand alone, and the stamp must change when an
    included file does.
    """
    path = path.resolve()
    if path in _seen:
        raise WheelhouseError(f"requirement files include each other: {path}")
    out = []
    for raw in path.read_text().splitlines():
        m = re.fullmatch(r"\s*(?:-r|--requirement)[ =]\s*(\S+)\s*(#.*)?", raw)
        if m:
            included = (path.parent / m.group(1))
            if not included.is_file():
                raise WheelhouseError(f"{path.name}: included file not found: {m.group(1)}")
            out.append(f"# --- from {os.path.relpath(included.resolve(), REPO)}")
            out.append(flatten_requirements(included, _seen + (path,)).rstrip("\n"))
            out.append(f"# --- end of {os.path.relpath(included.resolve(), REPO)}")
        else:
            out.append(raw)
    return "\n".join(out) + "\n"


def read_requirements(path: Path) -> Requirements:
    req = Requirements(path)
    for raw in flatten_requirements(path).splitlines():
        line = raw.strip()
        if line.startswith(NODEPS_MARK):
            req.nodeps.append(line[len(NODEPS_MARK):].strip())
            continue
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", line)
        if m:
            req.pins[normalize(m.group(1))] = m.group(2)
        else:
            req.other.append(line)
    return req


@dataclass(frozen=True)
class WheelSet:
    name: str
    requirements: Path
    exact: bool        # the file must pin every package that ends up installed
    check: str         # Python run in a venv holding the set

    def req(self) -> Requirements:
        return read_requirements(self.requirements)

    def recipe_hash(self) -> str:
        """Keys the stamp (and the test venv): the file's bytes plus how wheels are picked."""
        recipe = {"format": BUILD_FORMAT, "python": PYTHON_VERSION, "abi": ABI,
                  "platforms": PLATFORMS, "file": self.requirements.name}
        h = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode())
        h.update(b"\0" + flatten_requirements(self.requirements).encode())
        return h.hexdigest()[:16]


SETS = {
    "tools": WheelSet("tools", REQ_DIR / "hosts.txt", exact=False, check=TOOLS_CHECK),
    "sglang": WheelSet("sglang", REQ_DIR / "sglang-host.txt", exact=True, check=SGLANG_CHECK),
    "router": WheelSet("router", REQ_DIR / "router-host.txt", exact=True, check=ROUTER_CHECK),
}


def wheelhouse_root(cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / "wheelhouse"


def set_dir(name: str, cache: Path | None = None) -> Path:
    return wheelhouse_root(cache) / name


# ---------------------------------------------------------------- wheel file names

def parse_wheel(filename: str) -> tuple[str, str, list[str], list[str], list[str]]:
    """(name, version, python tags, abi tags, platform tags) of a wheel file name."""
    parts = filename[:-len(".whl")].split("-")
    if not filename.endswith(".whl") or len(parts) not in (5, 6):
        raise WheelhouseError(f"not a wheel file name: {filename}")
    name, version = parts[0], parts[1]
    py, abi, plat = parts[-3:]
    return normalize(name), version, py.split("."), abi.split("."), plat.split(".")


def wheel_fits_target(filename: str) -> bool:
    """True when pip on a bookworm host (cp311, glibc 2.36, x86_64) can install this wheel."""
    pys, abis, plats = parse_wheel(filename)[2:]
    plat_ok = False
    for plat in plats:
        if plat == "any":
            plat_ok = True
        m = re.fullmatch(r"manylinux_2_(\d+)_x86_64", plat)
        if m and int(m.group(1)) <= GLIBC_MAX:
            plat_ok = True
        if plat in ("manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"):
            plat_ok = True
    py_ok = False
    for abi in abis:
        if abi == "none" and any(py in ("py3", "py311", "cp311") for py in pys):
            py_ok = True
        elif abi == ABI and "cp311" in pys:
            py_ok = True
        elif abi == "abi3" and any(re.fullmatch(r"cp3([2-9]|1[01])", py) for py in pys):
            py_ok = True
    return plat_ok and py_ok


def wheels_in(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.whl"))


# ---------------------------------------------------------------- stamp

def read_stamp(directory: Path) -> dict:
    try:
        return json.loads((directory / STAMP).read_text())
    except (OSError, ValueError):
        return {}


def stamp_state(ws: WheelSet, cache: Path | None = None) -> str:
    """'ok', 'missing' (never built) or 'stale' (requirements changed or files gone)."""
    directory = set_dir(ws.name, cache)
    stamp = read_stamp(directory)
    if not stamp:
        return "missing"
    if stamp.get("hash") != ws.recipe_hash():
        return "stale"
    for name, size in stamp.get("wheels", {}).items():
        try:
            if (directory / name).stat().st_size != size:
                return "stale"
        except OSError:
            return "stale"
    return "ok"


# ---------------------------------------------------------------- build

def _pip_download(args: list[str], dest: Path, logfile: Path, find_links: list[str]) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--dest", str(dest), "--only-binary=:all:",
           "--python-version", PYTHON_VERSION, "--implementation", "cp", "--abi", ABI,
           "--progress-bar", "off", "--disable-pip-version-check", "--no-input"]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    for link in find_links:
        cmd += ["--find-links", link]
    cmd += args
    with logfile.open("a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        text = logfile.read_text()
        tail = text.splitlines()[-15:]
        hint = ""
        if "No matching distribution found for torch" in text:
            hint = ("\n  The CPU torch wheel is not on PyPI: give pip a directory holding "
                    "torch-<version>+cpu-cp311-...whl (--find-links DIR or pip's find-links config).")
        raise WheelhouseError("pip download failed (exit %d), see %s:\n  %s%s"
                              % (proc.returncode, logfile, "\n  ".join(tail), hint))


def _check_exact_pins(req: Requirements) -> None:
    """Refuse before downloading anything: an open requirement could admit a CUDA torch (GBs)."""
    if req.other:
        raise WheelhouseError(f"{req.path.name}: every line must be name==version, got: {req.other}")
    torch = req.pins.get("torch")
    if torch is not None and not torch.endswith("+cpu"):
        raise WheelhouseError(f"{req.path.name}: torch must be the CPU build (==X.Y.Z+cpu), got {torch}")
    for spec in req.nodeps:
        if "==" not in spec:
            raise WheelhouseError(f"{req.path.name}: no-deps requirement must be pinned: {spec}")


def _check_complete(ws: WheelSet, req: Requirements, directory: Path) -> None:
    """Every wheel the resolver pulled in must be pinned: otherwise installs are not reproducible."""
    nodeps = {normalize(s.split("==")[0]): s.split("==")[1] for s in req.nodeps}
    wanted = {**req.pins, **nodeps}
    got: dict[str, str] = {}
    for wheel in wheels_in(directory):
        name, version = parse_wheel(wheel.name)[:2]
        got[name] = version
    unpinned = sorted(f"{n}=={v}" for n, v in got.items() if n not in wanted)
    if unpinned:
        raise WheelhouseError(f"{req.path.name} is incomplete: the resolver also pulled in "
                              f"{', '.join(unpinned)}; pin them there")
    wrong = sorted(f"{n}: pinned {wanted[n]}, got {v}" for n, v in got.items() if wanted[n] != v)
    missing = sorted(n for n in wanted if n not in got)
    if wrong or missing:
        raise WheelhouseError(f"{ws.name} wheelhouse does not match {req.path.name}: {wrong or missing}")


def build_set(ws: WheelSet, cache: Path, force: bool = False, find_links: list[str] = ()) -> bool:
    """Build one set unless its stamp is current; True when something was built."""
    root = wheelhouse_root(cache)
    directory = set_dir(ws.name, cache)
    if not force and stamp_state(ws, cache) == "ok":
        log(f"{ws.name}: up to date ({directory})")
        return False
    started = time.monotonic()
    req = ws.req()
    if ws.exact:
        _check_exact_pins(req)
    tmp = root / f".{ws.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    logfile = root / f"build-{ws.name}.log"
    logfile.write_text("")
    log(f"{ws.name}: downloading wheels for {ws.requirements.relative_to(REPO)} ...")
    _pip_download(["-r", str(ws.requirements)], tmp, logfile, list(find_links))
    if req.nodeps:
        log(f"{ws.name}: downloading {', '.join(req.nodeps)} (installed with --no-deps) ...")
        _pip_download(["--no-deps", *req.nodeps], tmp, logfile, list(find_links))
    misfits = [w.name for w in wheels_in(tmp) if not wheel_fits_target(w.name)]
    if misfits:
        raise WheelhouseError(f"{ws.name}: wheels that a bookworm cp311 host cannot install: {misfits}")
    if ws.exact:
        _check_complete(ws, req, tmp)
    # The requirement files travel with the wheels: an install inside a chroot sees only this dir.
    (tmp / "requirements").mkdir()
    (tmp / "requirements" / ws.requirements.name).write_text(flatten_requirements(ws.requirements))
    wheels = {w.name: w.stat().st_size for w in wheels_in(tmp)}
    stamp = {"hash": ws.recipe_hash(), "requirements": ws.requirements.name,
             "nodeps": req.nodeps, "wheels": wheels, "bytes": sum(wheels.values()),
             "seconds": round(time.monotonic() - started, 1),
             "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (tmp / STAMP).write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")
    old = root / f".{ws.name}.old"
    if old.exists():
        shutil.rmtree(old)
    if directory.exists():
        directory.rename(old)
    tmp.rename(directory)
    if old.exists():
        shutil.rmtree(old)
    log(f"{ws.name}: {len(wheels)} wheels, {stamp['bytes'] / 2**20:.0f} MiB in {stamp['seconds']} s "
        f"({directory})")
    return True


class _Lock:
    """Serializes builds: the Makefile and the rootfs builder may both ask for one."""

    def __init__(self, root: Path):
        root.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)

    def __enter__(self):
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def archive_path(name: str, cache: Path | None = None) -> Path:
    return wheelhouse_root(cache) / f"{name}.tar"


def archive_set(name: str, cache: Path | None = None) -> bool:
    """``<root>/<name>.tar``: the set's wheels at the archive's top level, as the model role unpacks a
    wheelhouse archive (one copy and one unpack per host instead of a stat and copy per wheel). Rewritten
    when its members (name, size, mtime) differ from the set's wheels (a set built again has new files),
    or it cannot be read; True when written."""
    directory = set_dir(name, cache)
    wheels = wheels_in(directory)  # sorted by name
    want = [(w.name, st.st_size, int(st.st_mtime)) for w, st in ((w, w.stat()) for w in wheels)]
    path = archive_path(name, cache)
    try:
        with tarfile.open(path) as tar:
            if [(m.name, m.size, int(m.mtime)) for m in tar.getmembers()] == want:
                return False
    except (OSError, tarfile.TarError):
        pass  # missing or unreadable: written below
    tmp = path.with_name(f".{path.name}.tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for wheel in wheels:
            info = tar.gettarinfo(str(wheel), arcname=wheel.name)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o644
            with open(wheel, "rb") as fh:
                tar.addfile(info, fh)
    tmp.chmod(0o644)
    tmp.replace(path)
    log(f"{name}: {len(wheels)} wheels in one archive ({path})")
    return True


def build(cache: Path | None = None, force: bool = False, find_links: list[str] = (),
          names: list[str] | None = None) -> dict[str, bool]:
    cache = cache or cache_dir()
    with _Lock(wheelhouse_root(cache)):
        built = {name: build_set(SETS[name], cache, force, find_links) for name in names or SETS}
        if "tools" in built:
            archive_set("tools", cache)
        return built


# ---------------------------------------------------------------- install

def _install(venv_python: str, wheelhouse_dir: str, args: list[str]) -> list[str]:
    # --isolated: no PIP_* variables or user config may add an index or a find-links dir;
    # --no-cache-dir: a rootfs must not keep a second copy of ~700 MB of wheels in ~/.cache/pip.
    return [venv_python, "-m", "pip", "--isolated", "--disable-pip-version-check", "--no-input",
            "install", "--no-cache-dir", "--no-index", "--find-links", wheelhouse_dir, *args]


def install_commands(venv_python: str | os.PathLike, wheelhouse_dir: str | os.PathLike) -> list[list[str]]:
    """Commands that install the SGLang set into an existing venv, offline.

    wheelhouse_dir is the sglang set's directory ($CACHE/wheelhouse/sglang, or wherever it is
    bind-mounted inside a chroot); the requirement file is read from its requirements/ subdir, so
    the commands need nothing else from the controller. Run them in order.
    """
    py, w = str(venv_python), str(wheelhouse_dir).rstrip("/") or "/"
    nodeps = read_requirements(SETS["sglang"].requirements).nodeps
    req = f"{w}/requirements/{SETS['sglang'].requirements.name}"
    return [_install(py, w, ["-r", req]), _install(py, w, ["--no-deps", *nodeps])]


def tools_install_commands(venv_python: str | os.PathLike, wheelhouse_dir: str | os.PathLike) -> list[list[str]]:
    """Same for the tools set (huggingface_hub, safetensors, jmespath); wheelhouse_dir = .../tools."""
    return set_install_commands("tools", venv_python, wheelhouse_dir)


def set_install_commands(name: str, venv_python: str | os.PathLike,
                         wheelhouse_dir: str | os.PathLike) -> list[list[str]]:
    """The offline install of set ``name`` (one without no-deps lines: tools, router) into a venv."""
    py, w = str(venv_python), str(wheelhouse_dir).rstrip("/") or "/"
    return [_install(py, w, ["-r", f"{w}/requirements/{SETS[name].requirements.name}"])]


def commands_for(name: str, venv_python: str | os.PathLike, wheelhouse_dir: str | os.PathLike) -> list[list[str]]:
    return (install_commands(venv_python, wheelhouse_dir) if name == "sglang"
            else set_install_commands(name, venv_python, wheelhouse_dir))


def offline_env() -> dict[str, str]:
    """The environment for installs here: this controller's pip config points at /opt/wheels."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def offline_prefix() -> list[str]:
    """Run in an empty network namespace when we can: then 'offline' is a fact, not a flag."""
    if os.geteuid() == 0 and shutil.which("unshare"):
        return ["unshare", "--net"]
    return []


def run_offline(cmds: list[list[str]], what: str, timeout: float = 1800) -> None:
    for cmd in cmds:
        proc = subprocess.run(offline_prefix() + cmd, env=offline_env(), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout, check=False)
        if proc.returncode != 0:
            tail = "\n  ".join(proc.stdout.splitlines()[-20:])
            raise WheelhouseError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd[3:])}\n  {tail}")


def create_venv(venv_dir: Path) -> Path:
    """A venv from this interpreter's base Python (3.11 like the hosts); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", str(venv_dir)], check=True,
                   stdin=subprocess.DEVNULL, env=offline_env())
    return venv_dir / "bin" / "python"


def _ensure_venv(python: Path) -> Path:
    if python.exists():
        return python
    if python.name not in ("python", "python3") or python.parent.name != "bin":
        raise WheelhouseError(f"{python} does not exist (give VENV/bin/python to have it created)")
    log(f"creating venv {python.parent.parent}")
    return create_venv(python.parent.parent)


def _require_built(name: str, directory: Path) -> None:
    if not read_stamp(directory):
        raise WheelhouseError(f"no {name} wheelhouse at {directory}: run `wheelhouse.py build` first")


def verify(cache: Path | None = None, names: list[str] | None = None) -> dict[str, dict]:
    """Install each set into a throwaway venv from the wheelhouse alone and run its check."""
    cache = cache or cache_dir()
    results = {}
    for name in names or SETS:
        ws = SETS[name]
        directory = set_dir(name, cache)
        _require_built(name, directory)
        with tempfile.TemporaryDirectory(prefix=f"wheelhouse-verify-{name}-") as tmp:
            started = time.monotonic()
            python = create_venv(Path(tmp) / "venv")
            cmds = commands_for(name, python, directory)
            run_offline(cmds, f"{name} offline install")
            installed = time.monotonic() - started
            proc = subprocess.run(offline_prefix() + [str(python), "-c", ws.check], env=offline_env(),
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, check=False)
            if proc.returncode != 0:
                raise WheelhouseError(f"{name} check failed:\n{proc.stdout}{proc.stderr[-3000:]}")
            size = int(subprocess.run(["du", "-sb", tmp], capture_output=True, text=True, check=False)
                       .stdout.split()[0])
            results[name] = {"install_seconds": round(installed, 1), "venv_bytes": size,
                             "output": proc.stdout.strip()}
            log(f"{name}: offline install {installed:.1f} s, venv {size / 2**20:.0f} MiB; "
                + proc.stdout.strip().replace("\n", "; "))
    return results


# ---------------------------------------------------------------- CLI

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="wheelhouse.py", description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="download the wheel sets (no-op when up to date)")
    b.add_argument("--cache", type=Path, help="default: $GPUFLEET_LAB_CACHE")
    b.add_argument("--force", action="store_true", help="rebuild even when the stamp is current")
    b.add_argument("--find-links", action="append", default=[],
                   help="extra local wheel dir for pip download (pip's own config is honoured too)")
    b.add_argument("--set", choices=sorted(SETS), action="append", dest="sets")
    v = sub.add_parser("verify", help="offline install of each set into a throwaway venv")
    v.add_argument("--cache", type=Path)
    v.add_argument("--set", choices=sorted(SETS), action="append", dest="sets")
    for name in ("sglang", "tools", "router"):
        i = sub.add_parser(f"install-{name}", help=f"offline install of the {name} set into a venv")
        i.add_argument("--python", type=Path, required=True, help="VENV/bin/python (created if missing)")
        i.add_argument("--wheelhouse", type=Path, help=f"default: $GPUFLEET_LAB_CACHE/wheelhouse/{name}")
        i.add_argument("--cache", type=Path)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build":
            build(args.cache, args.force, args.find_links, args.sets)
        elif args.cmd == "verify":
            verify(args.cache, args.sets)
        else:
            name = args.cmd.split("-", 1)[1]
            directory = args.wheelhouse or set_dir(name, args.cache)
            _require_built(name, directory)
            python = _ensure_venv(args.python)
            cmds = commands_for(name, python, directory)
            started = time.monotonic()
            run_offline(cmds, f"{name} install")
            log(f"{name}: installed into {python.parent.parent} in {time.monotonic() - started:.1f} s")
    except WheelhouseError as exc:
        print(f"wheelhouse.py: error: {exc}", file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired as exc:
        print(f"wheelhouse.py: error: timed out after {exc.timeout:.0f} s: {exc.cmd[:4]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
