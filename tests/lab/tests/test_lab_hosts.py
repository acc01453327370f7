"""The booted lab hosts behave like real, isolated Debian machines (needs `labctl.py up`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("GPUFLEET_LAB_CACHE", os.path.expanduser("~/.cache/gpufleet-lab")))
LAB_JSON = CACHE / "run" / "lab.json"
SSH_OPTS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes",
            "-o", "ConnectTimeout=5"]

pytestmark = pytest.mark.lab


def _load() -> dict | None:
    try:
        return json.loads(LAB_JSON.read_text())
    except (OSError, ValueError):
        return None


_DATA = _load()
HOSTS = sorted(_DATA["hosts"]) if _DATA else ["gpu1", "gpu2"]


@pytest.fixture(scope="module")
def lab() -> dict:
    if _DATA is None:
        pytest.skip(f"the lab is not up ({LAB_JSON} missing): run `tests/lab/labctl.py up`")
    return _DATA


def ssh(lab: dict, host: str, command: str, timeout: int = 60) -> subprocess.CompletedProcess:
    addr = lab["hosts"][host]["address"]
    return subprocess.run(["ssh", "-i", lab["ssh_key"], *SSH_OPTS, f"root@{addr}", command],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)


def ok(lab: dict, host: str, command: str, timeout: int = 60) -> str:
    proc = ssh(lab, host, command, timeout)
    assert proc.returncode == 0, f"{host}: `{command}` exited {proc.returncode}: {proc.stderr}"
    return proc.stdout


@pytest.mark.parametrize("host", HOSTS)
def test_systemd_is_pid1_and_system_up(lab, host):
    assert ok(lab, host, "ps -p 1 -o comm=").strip() == "systemd"
    # --wait: right after `up` the boot may still be finishing; bounded by `timeout`.
    state = ssh(lab, host, "timeout 60 systemctl is-system-running --wait").stdout.strip()
    failed = ssh(lab, host, "systemctl --failed --no-legend --plain").stdout
    assert state in ("running", "degraded"), f"{host}: {state}; failed units:\n{failed}"
    assert ok(lab, host, "hostname").strip() == host


@pytest.mark.parametrize("host", HOSTS)
def test_sshd_root_by_key_only(lab, host):
    assert ok(lab, host, "systemctl is-active ssh.service").strip() == "active"
    config = ok(lab, host, "sshd -T").lower().splitlines()
    assert "permitrootlogin without-password" in config  # sshd -T's name for prohibit-password
    assert "passwordauthentication no" in config
    assert "kbdinteractiveauthentication no" in config
    addr = lab["hosts"][host]["address"]
    denied = subprocess.run(
        ["ssh", *SSH_OPTS, "-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password",
         f"root@{addr}", "true"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, check=False)
    assert denied.returncode != 0
    assert "Permission denied" in denied.stderr


def test_hosts_have_their_own_identity(lab):
    ids = {h: ok(lab, h, "cat /etc/machine-id /etc/ssh/ssh_host_ed25519_key.pub") for h in HOSTS}
    assert len(set(ids.values())) == len(HOSTS), "hosts share a machine-id or ssh host key"


@pytest.mark.parametrize("host", HOSTS)
def test_tools_present(lab, host):
    assert ok(lab, host, "python3 --version").startswith("Python 3.11")
    assert "aria2 version" in ok(lab, host, "aria2c --version")
    ok(lab, host, "python3 -m venv --help >/dev/null")


@pytest.mark.parametrize("host", HOSTS)
def test_sglang_venv_imports(lab, host):
    if not lab.get("sglang_installed"):
        pytest.skip("rootfs was built with --no-sglang: no SGLang venv on the hosts")
    python = lab["sglang_python"]
    code = 'import sglang, importlib.metadata as m; print(m.version("sglang"))'
    out = ok(lab, host, f"{python} -c '{code}'", timeout=180)
    assert out.strip() == python.split("/")[-3]


@pytest.mark.parametrize("host", HOSTS)
def test_payload_bytecode_cache_in_every_python_of_the_host(lab, host):
    """The lab-only bytecode cache for module payloads (tests/lab/hostpy/gpufleet_lab_pyc.py) is loaded
    by the system Python and by venvs made from it (the model role's tools venv runs hf_snapshot and
    model_verify), through the standard library's directory and Debian's sitecustomize."""
    code = "import zipimport; print(zipimport._compile_source.__module__)"
    assert ok(lab, host, f'python3 -c "{code}"').strip() == "gpufleet_lab_pyc"
    venv = "/tmp/gflab-pyc-venv"
    out = ok(lab, host, f'rm -rf {venv} && python3 -m venv --without-pip {venv} && {venv}/bin/python -c "{code}"; '
                        f'rm -rf {venv}')
    assert out.strip() == "gpufleet_lab_pyc"
    if lab.get("sglang_installed"):
        assert ok(lab, host, f'{lab["sglang_python"]} -c "{code}"').strip() == "gpufleet_lab_pyc"


@pytest.mark.parametrize("host", HOSTS)
def test_no_route_out(lab, host):
    assert ok(lab, host, "ip -4 route show default").strip() == ""
    assert ok(lab, host, "ip -6 route show default").strip() == ""
    routes = ok(lab, host, "ip -4 route show table all type unicast").strip().splitlines()
    assert routes and all(r.startswith("10.231.0.0/24 ") for r in routes), routes
    # `ip route get` only asks the kernel: no packet leaves.
    proc = ssh(lab, host, "ip route get 192.0.2.1")
    assert proc.returncode != 0 and "unreachable" in proc.stderr.lower()


@pytest.mark.parametrize("host", HOSTS)
def test_hub_reachable(lab, host):
    if not lab["hub"]["started"]:
        pytest.skip("the Hub was not started (tests/lab/hub/server.py missing at `up`)")
    code = ok(lab, host, "python3 -c \"import urllib.request as u; "
                         "print(u.urlopen('http://10.231.0.2:8000/_lab/health', timeout=5).status)\"")
    assert code.strip() == "200"
    # The CDN address answers too (a TCP connect is enough: its paths are signed URLs).
    ok(lab, host, "python3 -c \"import socket; socket.create_connection(('10.231.0.3', 8000), 5)\"")


@pytest.mark.parametrize("src", HOSTS)
def test_hosts_reach_each_other(lab, src):
    # one test per source host (182 ssh runs at 14 hosts): xdist spreads them over its workers
    if len(HOSTS) < 2:
        pytest.skip("one host only: nothing to reach")
    for dst in HOSTS:
        if src == dst:
            continue
        addr = lab["hosts"][dst]["address"]
        banner = ok(lab, src, "python3 -c \"import socket; s = socket.create_connection("
                              f"('{addr}', 22), 5); print(s.recv(64).decode())\"")
        assert banner.startswith("SSH-2.0-OpenSSH"), f"{src} -> {dst}: {banner!r}"
        # By name, through the /etc/hosts the lab writes.
        ok(lab, src, f"getent hosts {dst} | grep -q '^{addr} '")


@pytest.mark.parametrize("host", HOSTS)
def test_nginx_installed_but_its_packaged_site_off(lab, host):
    # The peer exchange starts its own nginx per run (peer_serve); the package's own service must
    # not hold port 80 on every host, as on a site that installed nginx-light only for us.
    ok(lab, host, "test -x /usr/sbin/nginx")
    assert ssh(lab, host, "systemctl is-enabled nginx.service").stdout.strip() == "disabled"
    assert ssh(lab, host, "systemctl is-active nginx.service").stdout.strip() == "inactive"


def test_overlays_share_the_rootfs(lab):
    mounts = Path("/proc/mounts").read_text().splitlines()
    for host, info in lab["hosts"].items():
        merged = str(Path(info["dir"]) / "merged")
        line = next((m for m in mounts if m.split()[1] == merged), None)
        assert line and line.split()[2] == "overlay", f"{host}: no overlay at {merged}"
        assert f"lowerdir={lab['rootfs']}" in line
        upper = Path(info["dir"]) / "upper"
        size = sum(f.stat().st_size for f in upper.rglob("*") if f.is_file() and not f.is_symlink())
        assert size < 200 * 2**20, f"{host}: upper layer holds {size} bytes: a copy of the rootfs?"


def test_inventory_drives_ansible(lab):
    venv = CACHE / "venv" / "bin"
    if not (venv / "ansible").exists():
        pytest.skip(f"no ansible in {venv}")
    env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(venv / "ansible"), "gpu_nodes", "-i", lab["inventory"], "-m", "ping",
                           "-o"], capture_output=True, text=True, timeout=180, env=env,
                          stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for host in HOSTS:
        assert f"{host} | SUCCESS" in proc.stdout
    inv = subprocess.run([str(venv / "ansible-inventory"), "-i", lab["inventory"], "--list"],
                         capture_output=True, text=True, timeout=60, env=env, check=False)
    hostvars = json.loads(inv.stdout)["_meta"]["hostvars"]
    assert hostvars[HOSTS[0]]["lab_hub_endpoint"] == "http://10.231.0.2:8000"
    assert hostvars[HOSTS[0]]["lab_hub_cdn"] == "http://10.231.0.3:8000"
