"""Lab hosts: a Debian rootfs shared read-only by overlay, booted with systemd-nspawn.

Why it looks like this (traps measured on this machine, see DESIGN.md "The lab"):
- PID 1 of the machine is not systemd: nspawn runs with --register=no --keep-unit and we enter
  guests with nsenter, never machinectl.
- cgroups are a v1/v2 hybrid and nspawn --keep-unit creates `payload`/`supervisor` next to its own
  cgroup: two nspawns in the same cgroup collide, so each host gets its own cgroup dir under
  `gflab/` in the name=systemd and unified trees (removed again by `down`).
- A guest reboot ends nspawn with exit 133: a small supervisor process restarts it.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SGLANG_VERSION = "0.5.23"
SGLANG_PREFIX = f"/opt/sglang/{SGLANG_VERSION}"
SUITE = "bookworm"
PACKAGES = [
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-venv", "aria2",
    "iproute2", "ca-certificates",
    # the peer exchange's file server (docs/fleet.md); the role installs it on real hosts
    "nginx-light",
]
MIRRORS = [
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
]
# Bump when customize() changes in a way that needs a rebuild.
CUSTOMIZE_VERSION = "4"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_LAB = "gflab"
EXIT_REBOOT = 133
MAX_RESTARTS = 10

SSHD_CONF = """\
# gpufleet lab: root logs in with the lab key only.
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
"""

# Host keys are made per host at first boot: a shared rootfs must not hand every host the same keys.
SSH_DROPIN = """\
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
"""


class LabError(RuntimeError):
    """An expected failure: reported as one line, without a traceback."""


def cache_dir() -> Path:
    return Path(os.environ.get("GPUFLEET_LAB_CACHE", os.path.expanduser("~/.cache/gpufleet-lab")))


def rootfs_dir() -> Path:
    return cache_dir() / "rootfs"


def stamp_path() -> Path:
    return cache_dir() / "rootfs.stamp.json"


def run_dir() -> Path:
    return cache_dir() / "run"


def host_dir(name: str) -> Path:
    return run_dir() / "hosts" / name


def ssh_key() -> Path:
    return run_dir() / "ssh" / "id_ed25519"


def sglang_requirements() -> Path:
    return REPO / "requirements" / "sglang-host.txt"


def standin_source() -> Path:
    """The lab's SGLang stand-in, baked into the SGLang venv (started as `-m gpufleet_lab_sglang`)."""
    return HERE / "sglang_standin" / "gpufleet_lab_sglang.py"


def wheelhouse_script() -> Path:
    return HERE / "wheelhouse.py"


def log(msg: str) -> None:
    print(f"[lab] {msg}", flush=True)


# ---------------------------------------------------------------- rootfs

def base_recipe_hash() -> str:
    recipe = {
        "suite": SUITE, "variant": "minbase", "packages": PACKAGES, "mirrors": MIRRORS,
        "customize": CUSTOMIZE_VERSION, "sshd": SSHD_CONF, "dropin": SSH_DROPIN,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def sglang_recipe_hash() -> str:
    req = sglang_requirements()
    content = req.read_bytes() if req.exists() else b""
    # The stand-in's bytes are part of the layer: editing it makes the state `need-sglang`, and
    # install_sglang() (which rebuilds the venv from scratch) copies the new file in.
    standin = standin_source()
    standin_bytes = standin.read_bytes() if standin.exists() else b""
    return hashlib.sha256(SGLANG_PREFIX.encode() + b"\0" + content + b"\0" + standin_bytes).hexdigest()[:16]


def read_stamp() -> dict:
    try:
        return json.loads(stamp_path().read_text())
    except (OSError, ValueError):
        return {}


def rootfs_state(want_sglang: bool) -> str:
    """'ok', 'missing', 'stale-base' or 'need-sglang'."""
    stamp = read_stamp()
    if not rootfs_dir().is_dir() or not stamp:
        return "missing"
    if stamp.get("base") != base_recipe_hash():
        return "stale-base"
    if want_sglang and stamp.get("sglang") != sglang_recipe_hash():
        return "need-sglang"
    return "ok"


def _run(cmd: list[str], what: str, **kw) -> None:
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, check=False, **kw)
    if proc.returncode != 0:
        raise LabError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd[:4])} ...")


def customize(root: Path) -> None:
    (root / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/ssh/sshd_config.d/gpufleet-lab.conf").write_text(SSHD_CONF)
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    dropin = root / "etc/systemd/system/ssh.service.d"
    dropin.mkdir(parents=True, exist_ok=True)
    (dropin / "gpufleet-lab.conf").write_text(SSH_DROPIN)
    # Per-host values (hostname, machine-id, authorized_keys) go into each host's overlay upper.
    for name in ("etc/hostname",):
        path = root / name
        if path.exists():
            path.unlink()
    (root / "etc/machine-id").write_text("")
    _run(["systemctl", f"--root={root}", "enable", "ssh.service"], "enable sshd")
    # Units that only fail in a container without a console or hardware.
    _run(["systemctl", f"--root={root}", "mask", "getty@tty1.service", "systemd-remount-fs.service"],
         "mask units")
    # Debian enables nginx's own site on port 80 at install; the peer exchange runs its own instance
    # per run (systemd-run), so the packaged service stays off as on a site that does not use it.
    _run(["systemctl", f"--root={root}", "disable", "nginx.service"], "disable nginx.service")
    (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)


def build_base(root: Path) -> None:
    tmp = root.with_name(root.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    cmd = ["mmdebstrap", "--variant=minbase", "--mode=root", f"--include={','.join(PACKAGES)}",
           '--aptopt=Acquire::Retries "3"', SUITE, str(tmp), *MIRRORS]
    log("mmdebstrap " + SUITE + " (minbase) ...")
    _run(cmd, "mmdebstrap")
    customize(tmp)
    if root.exists():
        shutil.rmtree(root)
    tmp.rename(root)


def ensure_wheelhouse() -> Path:
    script = wheelhouse_script()
    if not script.exists():
        raise LabError(f"{script} does not exist yet: build with --no-sglang or add the wheelhouse")
    venv_python = cache_dir() / "venv" / "bin" / "python"
    python = str(venv_python) if venv_python.exists() else sys.executable
    log("python tests/lab/wheelhouse.py build ...")
    _run([python, str(script), "build"], "wheelhouse build", cwd=REPO)
    wheels = cache_dir() / "wheelhouse" / "sglang"
    if not wheels.is_dir():
        raise LabError(f"wheelhouse build did not produce {wheels}")
    if not sglang_requirements().exists():
        raise LabError(f"{sglang_requirements()} is missing")
    return wheels


def no_deps_requirements(req: Path) -> list[str]:
    """`# no-deps: pkg==ver` lines: packages whose own metadata must be ignored (sglang itself
    demands the CUDA stack); pip's --no-deps applies to a whole command, hence a second one."""
    found = []
    for line in req.read_text().splitlines():
        line = line.strip()
        if line.startswith("# no-deps:"):
            spec = line.split(":", 1)[1].strip()
            if not spec or any(c in spec for c in "'\"$`;&|<> "):
                raise LabError(f"{req}: malformed no-deps line: {line!r}")
            found.append(spec)
    return found


def sglang_install_commands(wheels_mnt: str) -> list[list[str]]:
    """The wheelhouse's own install recipe when it offers one, else the same two steps here."""
    python = f"{SGLANG_PREFIX}/bin/python"
    try:
        sys.path.insert(0, str(HERE))
        import wheelhouse  # noqa: PLC0415 (written by another helper; optional until it exists)
        return wheelhouse.install_commands(python, wheels_mnt)
    except (ImportError, AttributeError):
        pass
    finally:
        sys.path.remove(str(HERE))
    req = sglang_requirements()
    base = [python, "-m", "pip", "--isolated", "--disable-pip-version-check", "install",
            "--no-cache-dir", "--no-index", "--find-links", wheels_mnt]
    cmds = [base + ["-r", "/mnt/req/" + req.name]]
    no_deps = no_deps_requirements(req)
    if no_deps:
        cmds.append(base + ["--no-deps", *no_deps])
    return cmds


def install_sglang(root: Path) -> None:
    wheels = ensure_wheelhouse()
    req = sglang_requirements()
    standin = standin_source()
    if not standin.exists():
        raise LabError(f"{standin} is missing")
    log(f"installing SGLang {SGLANG_VERSION} into the rootfs at {SGLANG_PREFIX} ...")
    q = shlex.quote
    chroot = f"chroot {q(str(root))} /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root"
    installs = "\n".join(f"{chroot} {' '.join(q(a) for a in cmd)}"
                         for cmd in sglang_install_commands("/mnt/wheelhouse"))
    check = ("import sglang, gpufleet_lab_sglang, importlib.metadata as m; "
             "print('sglang', m.version('sglang'), 'and the lab stand-in import in the rootfs')")
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    # A private mount namespace drops every bind mount when the install ends, even on a crash;
    # a private empty netns proves the install needs no network (--no-index).
    script = f"""
set -eu
R={q(str(root))}
mkdir -p "$R/mnt/wheelhouse" "$R/mnt/req"
mount --bind {q(str(wheels))} "$R/mnt/wheelhouse" && mount -o remount,bind,ro "$R/mnt/wheelhouse"
mount --bind {q(str(req.parent))} "$R/mnt/req" && mount -o remount,bind,ro "$R/mnt/req"
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
rm -rf "$R{SGLANG_PREFIX}"
{chroot} /usr/bin/python3 -m venv {SGLANG_PREFIX}
{installs}
SP=$({chroot} {SGLANG_PREFIX}/bin/python -c {q(purelib)})
install -m 0644 {q(str(standin))} "$R$SP/gpufleet_lab_sglang.py"
{chroot} {SGLANG_PREFIX}/bin/python -c {q(check)}
"""
    _run(["unshare", "--mount", "--net", "--propagation", "private", "sh", "-c", script],
         "SGLang install")
    for mnt in ("mnt/wheelhouse", "mnt/req"):
        try:
            (root / mnt).rmdir()
        except OSError:
            pass


def build_rootfs(want_sglang: bool = True, force: bool = False) -> float:
    """Build (or complete) the rootfs; returns the seconds spent (0 when cached)."""
    if any_host_mounted():
        state = rootfs_state(want_sglang)
        if state != "ok" or force:
            raise LabError("the rootfs is in use by running hosts: run `labctl.py down` first")
        return 0.0
    root = rootfs_dir()
    state = "missing" if force else rootfs_state(want_sglang)
    if state == "ok":
        log(f"rootfs up to date ({root})")
        return 0.0
    started = time.monotonic()
    cache_dir().mkdir(parents=True, exist_ok=True)
    stamp = read_stamp() if state == "need-sglang" else {}
    if state in ("missing", "stale-base"):
        stamp_path().unlink(missing_ok=True)
        build_base(root)
        stamp = {"base": base_recipe_hash(), "sglang": None,
                 "base_seconds": round(time.monotonic() - started, 1)}
        stamp_path().write_text(json.dumps(stamp, indent=1))
    if want_sglang:
        t0 = time.monotonic()
        install_sglang(root)
        stamp["sglang"] = sglang_recipe_hash()
        stamp["sglang_seconds"] = round(time.monotonic() - t0, 1)
        stamp_path().write_text(json.dumps(stamp, indent=1))
    elapsed = time.monotonic() - started
    log(f"rootfs built in {elapsed:.1f} s ({root})")
    return elapsed


# ---------------------------------------------------------------- mounts

def mounts_under(path: Path) -> list[str]:
    prefix = str(path).rstrip("/") + "/"
    found = []
    with open("/proc/self/mounts") as fh:
        for line in fh:
            target = line.split()[1].replace("\\040", " ")
            if target.startswith(prefix) or target == str(path):
                found.append(target)
    return found


def any_host_mounted() -> bool:
    return bool(mounts_under(run_dir() / "hosts"))


def mount_overlay(name: str) -> Path:
    hdir = host_dir(name)
    upper, work, merged = hdir / "upper", hdir / "work", hdir / "merged"
    for d in (upper, work, merged):
        d.mkdir(parents=True, exist_ok=True)
    if str(merged) not in mounts_under(merged):
        opts = f"lowerdir={rootfs_dir()},upperdir={upper},workdir={work}"
        _run(["mount", "-t", "overlay", "overlay", "-o", opts, str(merged)], f"overlay mount {name}")
    return merged


def umount_all_under(path: Path) -> list[str]:
    errors = []
    for target in sorted(mounts_under(path), key=len, reverse=True):
        proc = subprocess.run(["umount", target], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            # Busy: detach it so it goes away once the last user is gone.
            proc = subprocess.run(["umount", "-l", target], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                errors.append(f"umount {target}: {proc.stderr.strip()}")
    return errors


# ---------------------------------------------------------------- guest config

def prepare_guest(name: str, merged: Path, index_by_name: dict[str, str], pubkey: str) -> None:
    (merged / "etc/hostname").write_text(name + "\n")
    mid = merged / "etc/machine-id"
    if not mid.read_text().strip():
        mid.write_text(secrets.token_hex(16) + "\n")
    lines = ["127.0.0.1 localhost", f"127.0.1.1 {name}", "::1 localhost ip6-localhost ip6-loopback"]
    lines += [f"{addr} {host}" for host, addr in index_by_name.items()]
    (merged / "etc/hosts").write_text("\n".join(lines) + "\n")
    sshdir = merged / "root/.ssh"
    sshdir.mkdir(mode=0o700, exist_ok=True)
    auth = sshdir / "authorized_keys"
    auth.write_text(pubkey.strip() + "\n")
    auth.chmod(0o600)
    install_pyc_cache(merged)


def pyc_cache_source() -> Path:
    return HERE / "hostpy" / "gpufleet_lab_pyc.py"


def install_pyc_cache(merged: Path) -> None:
    """Every Python on the host built on the system interpreter (the system one, the model role's
    tools venv, the SGLang venv) keeps the bytecode of Ansible's module payloads: a lab-only speed-up,
    tests/lab/hostpy/gpufleet_lab_pyc.py says why and what it leaves alone. The file goes into the
    standard library's directory, which venvs share, and Debian's sitecustomize imports it."""
    stdlib = [d for d in sorted((merged / "usr/lib").glob("python3.*")) if (d / "os.py").is_file()]
    if len(stdlib) != 1:
        raise LabError(f"expected one Python standard library in the rootfs, found {[d.name for d in stdlib]}")
    shutil.copyfile(pyc_cache_source(), stdlib[0] / "gpufleet_lab_pyc.py")
    hook = merged / "etc" / stdlib[0].name / "sitecustomize.py"
    line = "import gpufleet_lab_pyc  # the lab's payload bytecode cache (tests/lab/hosts.py)\n"
    text = hook.read_text() if hook.is_file() else ""
    if line not in text:
        hook.parent.mkdir(parents=True, exist_ok=True)
        hook.write_text(text + ("" if not text or text.endswith("\n") else "\n") + line)


# ---------------------------------------------------------------- cgroups

def cgroup_hierarchies() -> list[Path]:
    """Trees nspawn uses for its own cgroup: name=systemd (v1) and/or the unified one."""
    found = []
    for sub in ("systemd", "unified"):
        if (CGROUP_ROOT / sub / "cgroup.procs").exists():
            found.append(CGROUP_ROOT / sub)
    if not found and (CGROUP_ROOT / "cgroup.controllers").exists():
        found.append(CGROUP_ROOT)  # pure v2 machine
    return found


def host_cgroups(name: str) -> list[Path]:
    return [h / CGROUP_LAB / name for h in cgroup_hierarchies()]


def lab_cgroup_dirs() -> list[Path]:
    """Every cgroup dir the lab may have left, in any mounted hierarchy."""
    found = []
    for h in CGROUP_ROOT.iterdir() if CGROUP_ROOT.is_dir() else []:
        if (h / CGROUP_LAB).is_dir():
            found.append(h / CGROUP_LAB)
    if (CGROUP_ROOT / CGROUP_LAB).is_dir() and CGROUP_ROOT / CGROUP_LAB not in found:
        found.append(CGROUP_ROOT / CGROUP_LAB)
    return found


def cgroup_pids(path: Path) -> list[int]:
    pids = []
    for dirpath, _dirs, files in os.walk(path):
        if "cgroup.procs" in files:
            try:
                pids += [int(p) for p in Path(dirpath, "cgroup.procs").read_text().split()]
            except OSError:
                pass
    return pids


def remove_cgroup_tree(path: Path) -> list[str]:
    errors = []
    for dirpath, _dirs, _files in sorted(os.walk(path), key=lambda e: len(e[0]), reverse=True):
        try:
            os.rmdir(dirpath)
        except FileNotFoundError:
            pass
        except OSError as exc:
            errors.append(f"rmdir {dirpath}: {exc.strerror}")
    return errors


# ---------------------------------------------------------------- processes

def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def find_procs(marker: str) -> list[int]:
    """PIDs whose argv contains `marker` exactly (a lab path, so never someone else's process)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            args = cmdline(int(entry))
            if any(marker in a for a in args):
                found.append(int(entry))
    return found


def nspawn_pids(name: str | None = None) -> list[int]:
    merged_marker = str(run_dir() / "hosts") + "/"
    pids = []
    for pid in find_procs(merged_marker):
        args = cmdline(pid)
        if not args or not args[0].endswith("systemd-nspawn"):
            continue
        if name is None or f"--machine={name}" in args:
            pids.append(pid)
    return pids


def supervisor_pids(name: str | None = None) -> list[int]:
    pids = []
    for pid in find_procs(str(Path(__file__).resolve())):
        args = cmdline(pid)
        if "_supervise" in args and (name is None or name in args):
            pids.append(pid)
    return pids


def leader_pid(nspawn_pid: int) -> int | None:
    """The container's PID 1 seen from here: a descendant of nspawn whose innermost pid is 1."""
    todo, seen = [nspawn_pid], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("NSpid:") and pid != nspawn_pid:
                    if line.split()[-1] == "1" and len(line.split()) > 2:
                        return pid
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        todo += [int(c) for c in children]
    return None


# ---------------------------------------------------------------- boot / supervise

def nspawn_cmd(name: str, merged: Path) -> list[str]:
    return [
        "systemd-nspawn", "--boot", "--register=no", "--keep-unit", "--quiet",
        f"--network-namespace-path=/run/netns/gflab-{name}", f"--machine={name}",
        "--console=read-only", "--resolv-conf=off", "--timezone=off", "--link-journal=no",
        "-D", str(merged),
    ]


def _join_cgroups(dirs: list[Path]) -> None:
    for d in dirs:
        with open(d / "cgroup.procs", "w") as fh:
            fh.write("0")


def supervise(name: str) -> int:
    """Run nspawn for host `name`, restarting it after a guest reboot (exit 133), bounded."""
    hdir = host_dir(name)
    merged = hdir / "merged"
    stop_flag = hdir / "stop"
    cgroups = host_cgroups(name)
    for d in cgroups:
        d.mkdir(parents=True, exist_ok=True)
    (hdir / "supervisor.pid").write_text(str(os.getpid()))
    child: subprocess.Popen | None = None

    def on_term(_sig, _frm):
        stop_flag.touch()
        if child and child.poll() is None:
            child.send_signal(signal.SIGTERM)  # nspawn forwards it as a clean poweroff

    signal.signal(signal.SIGTERM, on_term)
    rc = 0
    for attempt in range(MAX_RESTARTS + 1):
        if stop_flag.exists():
            break
        with open(hdir / "console.log", "ab") as out:
            child = subprocess.Popen(nspawn_cmd(name, merged), stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=out, preexec_fn=lambda: _join_cgroups(cgroups))
        (hdir / "nspawn.pid").write_text(str(child.pid))
        rc = child.wait()
        with open(hdir / "supervisor.log", "a") as fh:
            fh.write(f"{time.strftime('%H:%M:%S')} nspawn exited {rc} (start {attempt + 1})\n")
        if rc != EXIT_REBOOT:
            break
    (hdir / "nspawn.pid").unlink(missing_ok=True)
    return rc


def start_host(name: str) -> int:
    """Start the supervisor for `name` (detached); returns its pid."""
    hdir = host_dir(name)
    (hdir / "stop").unlink(missing_ok=True)
    with open(hdir / "supervisor.log", "a") as out:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "_supervise", name],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, cwd="/")
    return proc.pid


def wait_leader(name: str, supervisor: int, timeout: float = 30.0) -> int:
    """Wait until the container's PID 1 exists; fail early when the supervisor gave up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = read_pid(host_dir(name) / "nspawn.pid")
        leader = leader_pid(pid) if pid and pid_alive(pid) else None
        if leader:
            return leader
        if not pid_alive(supervisor):
            break
        time.sleep(0.1)
    tail = ""
    try:
        tail = (host_dir(name) / "console.log").read_text(errors="replace")[-800:]
    except OSError:
        pass
    raise LabError(f"{name}: systemd-nspawn did not start its container\n{tail}")


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [p for p in pids if pid_alive(p)]
        if not pids:
            return []
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


def stop_host(name: str, timeout: float = 20.0) -> list[str]:
    """Power the guest off cleanly, then kill whatever is left. Bounded."""
    hdir = host_dir(name)
    if hdir.exists():
        (hdir / "stop").touch()
    nspawns = nspawn_pids(name)
    for pid in nspawns:
        leader = leader_pid(pid)
        if leader:
            try:
                os.kill(leader, signal.SIGRTMIN + 4)  # systemd: poweroff
            except ProcessLookupError:
                pass
    left = _wait_gone(nspawns, timeout)
    for pid in left:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            if not _wait_gone([pid], 5):
                break
    # Anything still in the host's cgroups (a guest process that escaped nspawn's death).
    for d in host_cgroups(name):
        for pid in cgroup_pids(d):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for pid in supervisor_pids(name):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    errors = []
    still = [p for p in nspawn_pids(name) + supervisor_pids(name) if pid_alive(p)]
    if _wait_gone(still, 5):
        errors.append(f"{name}: processes still alive: {still}")
    for d in host_cgroups(name):
        if _wait_cgroup_empty(d, 5):
            errors += remove_cgroup_tree(d)
    errors += umount_all_under(hdir)
    return errors


def _wait_cgroup_empty(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not path.exists() or not cgroup_pids(path):
            return True
        time.sleep(0.1)
    return False


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "_supervise":
        sys.exit(supervise(sys.argv[2]))
    print("internal helper of labctl.py; use labctl.py", file=sys.stderr)
    sys.exit(2)
