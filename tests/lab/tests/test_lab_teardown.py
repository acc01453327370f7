"""`labctl.py down` leaves nothing behind: checked by inspecting the system, not labctl's own view.

Not marked `lab`: it brings up its own one-host lab (and builds the rootfs without SGLang if there
is none yet), so it is skipped when a lab is already up rather than tearing someone's lab down.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parent.parent
LABCTL = LAB / "labctl.py"
CACHE = Path(os.environ.get("GPUFLEET_LAB_CACHE", os.path.expanduser("~/.cache/gpufleet-lab")))
RUN = CACHE / "run"
CGROUP = Path("/sys/fs/cgroup")


def labctl(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LABCTL), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, check=False)


def lab_netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("gflab-")]


def lab_links() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
    return [n for n in names if n == "gflab0" or n.startswith("gfl-")]


def lab_mounts() -> list[str]:
    rootfs = str(CACHE / "rootfs")
    return [line for line in Path("/proc/mounts").read_text().splitlines()
            if str(RUN) in line or f"lowerdir={rootfs}" in line]


def lab_processes() -> list[str]:
    # Only patterns that are the lab's own: other sessions may run the Hub on loopback or use the venv.
    found = []
    for pattern in (str(RUN) + "/", "hosts.py _supervise", "systemd-nspawn.*--machine=gpu"):
        out = subprocess.run(["pgrep", "-a", "-f", "--", pattern], capture_output=True,
                             text=True, check=False).stdout
        found += [line for line in out.splitlines() if line.strip()]
    return found


def lab_cgroups() -> list[str]:
    return [str(p) for p in CGROUP.glob("*/gflab")] + [str(p) for p in CGROUP.glob("gflab")]


def leftovers() -> dict:
    found = {"netns": lab_netns(), "links": lab_links(), "mounts": lab_mounts(),
             "processes": lab_processes(), "cgroups": lab_cgroups()}
    return {k: v for k, v in found.items() if v}


@pytest.fixture(scope="module")
def clean_slate():
    if os.geteuid() != 0:
        pytest.skip("needs root (netns, mounts, systemd-nspawn)")
    for tool in ("systemd-nspawn", "mmdebstrap", "ip"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    if (RUN / "lab.json").exists() or "gflab0" in lab_links() or lab_netns():
        pytest.skip("a lab is already up: not tearing it down from a test (run `labctl.py down`)")
    yield
    labctl("down", timeout=120)


def test_up_then_down_leaves_nothing(clean_slate):
    up = labctl("up", "--hosts", "1", "--no-sglang", timeout=1200)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert labctl("status").returncode == 0
        assert "gflab-gpu1" in lab_netns() and "gfl-gpu1" in lab_links()
        assert any("--machine=gpu1" in p for p in lab_processes()), "no systemd-nspawn for gpu1"
        assert any(" overlay " in m for m in lab_mounts())
        assert lab_cgroups()
    finally:
        down = labctl("down", timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert leftovers() == {}
    assert not RUN.exists()
    again = labctl("down")
    assert again.returncode == 0 and leftovers() == {}


def test_down_after_up_died_half_way(clean_slate):
    # What a crashed `up` can leave: network, an overlay mount, cgroup dirs, an orphaned container
    # whose nspawn and supervisor were SIGKILLed.
    up = labctl("up", "--hosts", "1", "--no-sglang", timeout=1200)
    assert up.returncode == 0, up.stdout + up.stderr
    hdir = RUN / "hosts" / "gpu1"
    for name in ("supervisor.pid", "nspawn.pid"):
        os.kill(int((hdir / name).read_text()), signal.SIGKILL)
    (RUN / "lab.json").unlink()
    subprocess.run(["ip", "netns", "add", "gflab-gpu3"], check=True)
    subprocess.run(["ip", "link", "add", "gfl-gpu3", "type", "veth", "peer", "name", "gfl-gpu3p"],
                   check=True)
    for tree in CGROUP.glob("*/gflab"):
        (tree / "gpu3" / "payload").mkdir(parents=True)
    assert labctl("status").returncode == 1
    down = labctl("down", timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert leftovers() == {}
