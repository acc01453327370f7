"""Bring the gpufleet lab (hosts + Hub) up and down.

  labctl.py rootfs [--no-sglang] [--force]   build the cached host rootfs
  labctl.py up [--hosts N] [--no-sglang]     bridge, netns, hosts (systemd-nspawn), Hub
  labctl.py down                             remove everything `up` made, whatever state it is in
  labctl.py status                           exit 0 when the full lab is up
  labctl.py exec gpuN -- CMD...              run CMD on a host over ssh

Everything generated lives under $GPUFLEET_LAB_CACHE (default ~/.cache/gpufleet-lab).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hosts  # noqa: E402
import netlab  # noqa: E402
import ready  # noqa: E402
from hosts import LabError, log  # noqa: E402

SSH_OPTS = [
    "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
    "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes",
]
HUB_PORT = 8000
SSH_WAIT = 120.0
HUB_WAIT = 60.0


def lab_json() -> Path:
    return hosts.run_dir() / "lab.json"


def inventory() -> Path:
    return hosts.run_dir() / "inventory.ini"


def host_names(n: int) -> list[str]:
    return [f"gpu{i}" for i in range(1, n + 1)]


def hub_server() -> Path:
    return hosts.HERE / "hub" / "server.py"


def hub_dir() -> Path:
    return hosts.run_dir() / "hub"


def controller_python() -> str:
    venv = hosts.cache_dir() / "venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def ssh_cmd(addr: str, *cmd: str, timeout: int = 5) -> list[str]:
    return ["ssh", "-i", str(hosts.ssh_key()), *SSH_OPTS, "-o", f"ConnectTimeout={timeout}",
            f"root@{addr}", *cmd]


def ssh_ok(addr: str) -> bool:
    try:
        proc = subprocess.run(ssh_cmd(addr, "true", timeout=2), stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=10, check=False)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def hub_healthy() -> bool:
    try:
        with urllib.request.urlopen(f"http://{netlab.HUB_API_ADDR}:{HUB_PORT}/_lab/health",
                                    timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


# ---------------------------------------------------------------- up

def ensure_ssh_key() -> str:
    key = hosts.ssh_key()
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        key.parent.chmod(0o700)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpufleet-lab",
                        "-f", str(key)], check=True, stdin=subprocess.DEVNULL)
    return key.with_suffix(".pub").read_text()


def host_running(name: str) -> bool:
    return bool(hosts.nspawn_pids(name))


def start_hub() -> tuple[int, subprocess.Popen | None] | None:
    """(pid, the process when started now, None when it was already running); None: no server.py."""
    server = hub_server()
    if not server.exists():
        log(f"WARNING: {server} does not exist: the Hub is NOT started")
        return None
    hdir = hub_dir()
    hdir.mkdir(parents=True, exist_ok=True)
    pid = hosts.read_pid(hdir / "hub.pid")
    if pid and hosts.pid_alive(pid):
        return pid, None
    fixtures = hosts.cache_dir() / "fixtures"
    cmd = ["ip", "netns", "exec", netlab.HUB_NETNS, controller_python(), str(server),
           "--store", str(fixtures), "--api", f"{netlab.HUB_API_ADDR}:{HUB_PORT}",
           "--cdn", f"{netlab.HUB_CDN_ADDR}:{HUB_PORT}", "--log", str(hdir / "requests.jsonl"),
           "--tokens", str(fixtures / "tokens.json")]
    # The Hub outlives labctl (its own session); `ip netns exec` execs the server, so the pid is its.
    proc = ready.spawn(cmd, ready_file=hdir / "ready.json", log=hdir / "server.log",
                       start_new_session=True, cwd=str(hosts.REPO))
    (hdir / "hub.pid").write_text(str(proc.pid))
    return proc.pid, proc


def wait_hub(pid: int, proc: subprocess.Popen | None) -> None:
    """A Hub started now: until its ready file is there. One left running by an earlier `up`: until
    it answers its health check (it may predate --ready-file)."""
    hdir = hub_dir()
    if proc is not None:
        # The ready file says it listens inside its namespace; the health check that it answers at
        # its lab address from the controller, across the bridge the hosts use.
        wait_until("the lab Hub", lambda: ready.read(hdir / "ready.json") and hub_healthy(), alive=proc,
                   timeout=HUB_WAIT, log=hdir / "server.log")
    else:
        wait_until("the lab Hub", hub_healthy, alive=lambda: hosts.pid_alive(pid), timeout=HUB_WAIT,
                   log=hdir / "server.log")


def wait_until(what: str, check, *, alive=lambda: True, timeout: float, interval: float = ready.POLL_SECONDS,
               log: Path | None = None):
    """ready.wait_until, failing as labctl does (LabError)."""
    try:
        return ready.wait_until(check, alive=alive, what=what, timeout=timeout, interval=interval, log=log)
    except ready.NotReady as exc:
        raise LabError(str(exc)) from None


def write_inventory(names: list[str]) -> None:
    key = hosts.ssh_key()
    lines = ["[gpu_nodes]"]
    for i, name in enumerate(names, 1):
        lines.append(
            f"{name} ansible_host={netlab.host_addr(i)} ansible_user=root "
            f"ansible_ssh_private_key_file={key} "
            "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null' "
            "ansible_python_interpreter=/usr/bin/python3")
    lines += ["", "[gpu_nodes:vars]",
              f"lab_hub_endpoint=http://{netlab.HUB_API_ADDR}:{HUB_PORT}",
              f"lab_hub_cdn=http://{netlab.HUB_CDN_ADDR}:{HUB_PORT}", ""]
    inventory().write_text("\n".join(lines))


def write_lab_json(names: list[str], hub_pid: int | None, up_seconds: float) -> None:
    stamp = hosts.read_stamp()
    data = {
        "hosts": {},
        "controller": netlab.CONTROLLER_ADDR,
        "bridge": netlab.BRIDGE,
        "ssh_key": str(hosts.ssh_key()),
        "ssh_user": "root",
        "inventory": str(inventory()),
        "rootfs": str(hosts.rootfs_dir()),
        "sglang_installed": bool(stamp.get("sglang")),
        "sglang_python": f"{hosts.SGLANG_PREFIX}/bin/python",
        "hub": {
            "netns": netlab.HUB_NETNS,
            "endpoint": f"http://{netlab.HUB_API_ADDR}:{HUB_PORT}",
            "cdn": f"http://{netlab.HUB_CDN_ADDR}:{HUB_PORT}",
            "pid": hub_pid,
            "started": hub_pid is not None,
            "log": str(hub_dir() / "requests.jsonl"),
        },
        "up_seconds": round(up_seconds, 2),
    }
    for i, name in enumerate(names, 1):
        hdir = hosts.host_dir(name)
        nspawn = hosts.read_pid(hdir / "nspawn.pid")
        data["hosts"][name] = {
            "address": netlab.host_addr(i),
            "netns": netlab.host_netns(name),
            "supervisor_pid": hosts.read_pid(hdir / "supervisor.pid"),
            "nspawn_pid": nspawn,
            "leader_pid": hosts.leader_pid(nspawn) if nspawn else None,
            "dir": str(hdir),
        }
    lab_json().write_text(json.dumps(data, indent=2) + "\n")


def cmd_up(args) -> int:
    started = time.monotonic()
    n = args.hosts
    if not 1 <= n <= netlab.MAX_HOSTS:
        raise LabError(f"--hosts must be 1..{netlab.MAX_HOSTS}")
    want_sglang = not args.no_sglang
    if hosts.rootfs_state(want_sglang) != "ok":
        if hosts.any_host_mounted():
            raise LabError("the rootfs needs a rebuild but hosts still use it: run `down` first")
        hosts.build_rootfs(want_sglang)
    names = host_names(n)
    # Hosts beyond the requested count go away, so `up --hosts 1` after `up --hosts 3` is exact.
    for i in range(n + 1, netlab.MAX_HOSTS + 1):
        extra = f"gpu{i}"
        if hosts.host_dir(extra).exists() or hosts.nspawn_pids(extra):
            log(f"stopping {extra} (not requested)")
            errs = hosts.stop_host(extra)
            errs += netlab.delete_member(netlab.host_netns(extra), f"{netlab.VETH_PREFIX}{extra}")
            if errs:
                raise LabError("; ".join(errs))
            shutil.rmtree(hosts.host_dir(extra), ignore_errors=True)
    hosts.run_dir().mkdir(parents=True, exist_ok=True)
    pubkey = ensure_ssh_key()
    netlab.ensure_bridge()
    netlab.ensure_member(netlab.HUB_NETNS, f"{netlab.VETH_PREFIX}hub",
                         [netlab.HUB_API_ADDR, netlab.HUB_CDN_ADDR])
    addr_of = {name: netlab.host_addr(i) for i, name in enumerate(names, 1)}
    addr_of["hub"] = netlab.HUB_API_ADDR
    addr_of["hub-cdn"] = netlab.HUB_CDN_ADDR
    started_now: dict[str, int] = {}
    for i, name in enumerate(names, 1):
        netlab.ensure_member(netlab.host_netns(name), f"{netlab.VETH_PREFIX}{name}",
                             [netlab.host_addr(i)])
        if host_running(name):
            continue
        hosts.stop_host(name, timeout=5)  # clears a half-dead earlier attempt (cgroups, mounts)
        merged = hosts.mount_overlay(name)
        hosts.prepare_guest(name, merged, addr_of, pubkey)
        started_now[name] = hosts.start_host(name)
    for name, supervisor in started_now.items():
        hosts.wait_leader(name, supervisor)
    hub = start_hub()
    boot_started = time.monotonic()
    pending = dict((name, netlab.host_addr(i)) for i, name in enumerate(names, 1))

    def all_ssh() -> bool:
        for name, addr in list(pending.items()):
            if not host_running(name):
                raise LabError(f"{name}: systemd-nspawn exited during boot; see "
                               f"{hosts.host_dir(name) / 'console.log'}")
            if ssh_ok(addr):
                del pending[name]
        return not pending

    # ssh polls spawn a process per host per round: not at ready.POLL_SECONDS.
    wait_until("ssh on " + ", ".join(names), all_ssh, timeout=SSH_WAIT, interval=0.3)
    log(f"{n} host(s) answer ssh ({time.monotonic() - boot_started:.1f} s after start)")
    if hub is not None:
        wait_hub(*hub)
        log(f"Hub ready at http://{netlab.HUB_API_ADDR}:{HUB_PORT}")
    elapsed = time.monotonic() - started
    write_inventory(names)
    write_lab_json(names, hub[0] if hub else None, elapsed)
    log(f"inventory: {inventory()}")
    print(f"lab up: {n} host(s) in {elapsed:.1f} s wall time")
    return 0


# ---------------------------------------------------------------- down

def stop_hub(timeout: float = 10.0) -> list[str]:
    pids = set()
    pid = hosts.read_pid(hub_dir() / "hub.pid")
    if pid and hosts.pid_alive(pid):
        pids.add(pid)
    # Also whatever still runs inside the hub netns (e.g. after a lost pid file).
    if netlab.HUB_NETNS in netlab.list_netns():
        pids.update(netlab.netns_pids(netlab.HUB_NETNS))
    pids.update(p for p in hosts.find_procs(str(hub_dir() / "requests.jsonl")))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        if not hosts._wait_gone(list(pids), timeout if sig == signal.SIGTERM else 5):
            return []
    return [f"Hub processes still alive: {[p for p in pids if hosts.pid_alive(p)]}"]


def cmd_down(_args) -> int:
    started = time.monotonic()
    errors: list[str] = []
    errors += stop_hub()
    names = {f"gpu{i}" for i in range(1, netlab.MAX_HOSTS + 1)}
    hosts_root = hosts.run_dir() / "hosts"
    if hosts_root.is_dir():
        names.update(p.name for p in hosts_root.iterdir())
    active = [n for n in sorted(names) if hosts.nspawn_pids(n) or hosts.supervisor_pids(n)
              or (hosts_root / n).exists()]
    # Power all guests off at once, then wait: shutdown time does not add up per host.
    for name in active:
        (hosts_root / name).mkdir(parents=True, exist_ok=True)
        (hosts_root / name / "stop").touch()
        for pid in hosts.nspawn_pids(name):
            leader = hosts.leader_pid(pid)
            if leader:
                try:
                    os.kill(leader, signal.SIGRTMIN + 4)
                except ProcessLookupError:
                    pass
    hosts._wait_gone([p for n in active for p in hosts.nspawn_pids(n)], 20)
    for name in active:
        errors += hosts.stop_host(name, timeout=1)
    # Leftovers from any earlier, interrupted run.
    for ns in netlab.lab_netns():
        for pid in netlab.netns_pids(ns):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    errors += hosts.umount_all_under(hosts.run_dir())
    errors += netlab.teardown_all()
    for d in hosts.lab_cgroup_dirs():
        for pid in hosts.cgroup_pids(d):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        hosts._wait_gone(hosts.cgroup_pids(d), 5)
        errors += hosts.remove_cgroup_tree(d)
    if hosts.mounts_under(hosts.run_dir()):
        errors.append(f"mounts remain under {hosts.run_dir()}; host dirs kept")
    elif hosts.run_dir().exists():
        shutil.rmtree(hosts.run_dir())
    elapsed = time.monotonic() - started
    if errors:
        for err in errors:
            print(f"labctl down: {err}", file=sys.stderr)
        print(f"lab down INCOMPLETE after {elapsed:.1f} s")
        return 1
    print(f"lab down in {elapsed:.1f} s")
    return 0


# ---------------------------------------------------------------- status / exec

def cmd_status(_args) -> int:
    try:
        data = json.loads(lab_json().read_text())
    except (OSError, ValueError):
        data = None
    ok = data is not None
    print(f"bridge {netlab.BRIDGE}: {'up' if netlab.link_exists(netlab.BRIDGE) else 'absent'}")
    print(f"netns: {' '.join(netlab.lab_netns()) or '-'}")
    names = list(data["hosts"]) if data else sorted(
        {n for n in (f"gpu{i}" for i in range(1, netlab.MAX_HOSTS + 1)) if host_running(n)})
    ok = ok and netlab.link_exists(netlab.BRIDGE)
    for name in names:
        addr = data["hosts"][name]["address"] if data else netlab.host_addr(int(name[3:]))
        running = host_running(name)
        ssh = running and hosts.ssh_key().exists() and ssh_ok(addr)
        ok = ok and running and ssh
        print(f"{name} {addr}: nspawn {'running' if running else 'stopped'}, "
              f"ssh {'ok' if ssh else 'no'}")
    if data and data["hub"]["started"]:
        healthy = hub_healthy()
        ok = ok and healthy
        print(f"hub {data['hub']['endpoint']}: {'healthy' if healthy else 'DOWN'}")
    elif data:
        print("hub: not started (tests/lab/hub/server.py missing at `up`)")
    print("lab is up" if ok else "lab is NOT (fully) up")
    return 0 if ok else 1


def cmd_exec(args) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise LabError("usage: labctl.py exec gpuN -- CMD...")
    try:
        data = json.loads(lab_json().read_text())
        addr = data["hosts"][args.host]["address"]
    except (OSError, ValueError):
        raise LabError("the lab is not up (no lab.json): run `labctl.py up`") from None
    except KeyError:
        raise LabError(f"no host {args.host} in the lab") from None
    return subprocess.run(ssh_cmd(addr, *cmd), check=False).returncode


def cmd_rootfs(args) -> int:
    seconds = hosts.build_rootfs(want_sglang=not args.no_sglang, force=args.force)
    print(f"rootfs ready ({seconds:.1f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="labctl.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("rootfs", help="build the cached host rootfs")
    p.add_argument("--no-sglang", action="store_true", help="skip the SGLang venv (testing only)")
    p.add_argument("--force", action="store_true", help="rebuild even if the stamp matches")
    p.set_defaults(func=cmd_rootfs)
    p = sub.add_parser("up", help="bring the lab up (idempotent)")
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--no-sglang", action="store_true", help="accept a rootfs without SGLang")
    p.set_defaults(func=cmd_up)
    sub.add_parser("down", help="tear everything down").set_defaults(func=cmd_down)
    sub.add_parser("status", help="exit 0 when the full lab is up").set_defaults(func=cmd_status)
    p = sub.add_parser("exec", help="run a command on a host over ssh")
    p.add_argument("host")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_exec)
    args = parser.parse_args(argv)
    if os.geteuid() != 0 and args.command in ("rootfs", "up", "down"):
        print("labctl.py: must run as root (mounts, netns, nspawn)", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except LabError as exc:
        print(f"labctl.py {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"labctl.py {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
