"""Network plumbing of the lab: one bridge in the root netns, one netns per lab member.

Plan (fixed, see DESIGN.md "The lab"): bridge gflab0 = 10.231.0.1/24 (the controller), netns
gflab-hub with 10.231.0.2 (API) and 10.231.0.3 (CDN), netns gflab-gpuN with 10.231.0.(10+N).
No NAT and no default route anywhere: a lab member can only reach the bridge subnet.
"""

from __future__ import annotations

import json
import os
import subprocess

BRIDGE = "gflab0"
SUBNET_PREFIX = "10.231.0."
PREFIXLEN = 24
CONTROLLER_ADDR = SUBNET_PREFIX + "1"
HUB_NETNS = "gflab-hub"
HUB_API_ADDR = SUBNET_PREFIX + "2"
HUB_CDN_ADDR = SUBNET_PREFIX + "3"
# 14: make test runs its integration lanes at once on 2 + 2 + 2 hosts, the 4-host fleet target and the
# 4-host router roll (tests/stages.sh, do_integration).
MAX_HOSTS = 14
# Root-netns ends of the veth pairs all start with this, so teardown can find strays
# (veth names linger when a netns outlives its processes or a previous run died half way).
VETH_PREFIX = "gfl-"


class NetError(RuntimeError):
    pass


def host_netns(name: str) -> str:
    return f"gflab-{name}"


def host_addr(index: int) -> str:
    return f"{SUBNET_PREFIX}{10 + index}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _netns_ip(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _ip("-n", ns, *args, check=check)


def list_netns() -> list[str]:
    proc = _ip("-j", "netns", "list", check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return []
    return [entry["name"] for entry in json.loads(proc.stdout)]


def lab_netns() -> list[str]:
    return [ns for ns in list_netns() if ns == HUB_NETNS or ns.startswith("gflab-gpu")]


def link_exists(name: str, ns: str | None = None) -> bool:
    args = ("link", "show", "dev", name)
    proc = _netns_ip(ns, *args, check=False) if ns else _ip(*args, check=False)
    return proc.returncode == 0


def lab_links() -> list[str]:
    """Links in the root netns that belong to the lab (bridge and veth ends)."""
    proc = _ip("-j", "link", "show", check=False)
    if proc.returncode != 0:
        return []
    names = [link["ifname"] for link in json.loads(proc.stdout or "[]")]
    return [n for n in names if n == BRIDGE or n.startswith(VETH_PREFIX)]


def ensure_bridge() -> None:
    if not link_exists(BRIDGE):
        _ip("link", "add", BRIDGE, "type", "bridge")
    addrs = _ip("-j", "addr", "show", "dev", BRIDGE).stdout
    have = {a["local"] for link in json.loads(addrs or "[]") for a in link.get("addr_info", [])}
    if CONTROLLER_ADDR not in have:
        _ip("addr", "add", f"{CONTROLLER_ADDR}/{PREFIXLEN}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")


def ensure_member(ns: str, veth: str, addrs: list[str]) -> None:
    """Create netns `ns` joined to the bridge via veth `veth`, inside as eth0 with `addrs`."""
    if ns not in list_netns():
        _ip("netns", "add", ns)
    if not link_exists("eth0", ns):
        # A stale root-side end from an earlier run would make `link add` fail.
        if link_exists(veth):
            _ip("link", "del", veth)
        peer = veth + "p"
        _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", ns)
        _netns_ip(ns, "link", "set", peer, "name", "eth0")
    if not link_exists(veth):
        raise NetError(f"netns {ns} has eth0 but its bridge end {veth} is gone; run `down` first")
    _ip("link", "set", veth, "master", BRIDGE)
    _ip("link", "set", veth, "up")
    _netns_ip(ns, "link", "set", "lo", "up")
    current = json.loads(_netns_ip(ns, "-j", "addr", "show", "dev", "eth0").stdout or "[]")
    have = {a["local"] for link in current for a in link.get("addr_info", [])}
    for addr in addrs:
        if addr not in have:
            _netns_ip(ns, "addr", "add", f"{addr}/{PREFIXLEN}", "dev", "eth0")
    _netns_ip(ns, "link", "set", "eth0", "up")
    # Only the on-link subnet route exists; make sure nobody left a way out behind.
    _netns_ip(ns, "route", "flush", "table", "main", "exact", "0.0.0.0/0", check=False)


def netns_pids(ns: str) -> list[int]:
    proc = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []


def delete_member(ns: str, veth: str) -> list[str]:
    errors = []
    if ns in list_netns():
        proc = _ip("netns", "del", ns, check=False)
        if proc.returncode != 0:
            errors.append(f"netns del {ns}: {proc.stderr.strip()}")
    if link_exists(veth):
        proc = _ip("link", "del", veth, check=False)
        if proc.returncode != 0 and link_exists(veth):
            errors.append(f"link del {veth}: {proc.stderr.strip()}")
    return errors


def teardown_all() -> list[str]:
    """Remove every lab netns, veth and the bridge, whatever state a previous run left."""
    errors = []
    for ns in lab_netns():
        proc = _ip("netns", "del", ns, check=False)
        if proc.returncode != 0:
            errors.append(f"netns del {ns}: {proc.stderr.strip()}")
    for name in lab_links():
        if name == BRIDGE:
            continue
        proc = _ip("link", "del", name, check=False)
        if proc.returncode != 0 and link_exists(name):
            errors.append(f"link del {name}: {proc.stderr.strip()}")
    if link_exists(BRIDGE):
        proc = _ip("link", "del", BRIDGE, check=False)
        if proc.returncode != 0:
            errors.append(f"link del {BRIDGE}: {proc.stderr.strip()}")
    # `ip netns del` leaves the mount point file when the bind mount was already gone.
    for ns in ("gflab-hub", *(f"gflab-gpu{i}" for i in range(1, MAX_HOSTS + 1))):
        path = f"/run/netns/{ns}"
        if os.path.exists(path) and ns not in list_netns():
            try:
                os.unlink(path)
            except OSError:
                pass
    return errors
