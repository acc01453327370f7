# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang role's host decisions: interpreter, NVIDIA driver, device nodes, ProtectHome.

Private to the collection: not a public API, may change without notice.

The role gathers the facts on the host (a Python's version, ``/dev/nvidia-uvm``, nvidia-modprobe,
MIG mode, real paths) and the ``gpufleet.llm.sglang_host_problems`` filter turns them into
problems here, so the decisions are unit-tested although the lab has no NVIDIA driver.
Each problem names what is wrong and the fix.
"""

from __future__ import annotations

import re
from typing import Any

# ProtectHome=yes makes these empty and inaccessible for the service (systemd.exec(5)).
PROTECTED_HOME_ROOTS = ("/home", "/root", "/run/user")

_SPEC = re.compile(r"^\s*(===|~=|==|!=|<=|>=|<|>)\s*([0-9][0-9A-Za-z.+*!-]*)\s*$")
_RELEASE = re.compile(r"^(?:\d+!)?(\d+(?:\.\d+)*)")


def version_tuple(text: str) -> tuple[int, ...]:
    """The numeric release of a version (``"580.95.05"`` -> ``(580, 95, 5)``, ``"3.11.7rc1"`` -> ``(3, 11, 7)``).

    Pre-, post- and local parts are ignored: requires-python and driver versions are compared by
    release only, which is what pip does for an installed interpreter's ``python_full_version``.
    """
    match = _RELEASE.match(str(text).strip())
    if not match:
        raise ValueError("%r is not a version (expected digits and dots, such as 3.11.7 or 580.95.05)" % (text,))
    return tuple(int(part) for part in match.group(1).split("."))


def _padded(left: tuple[int, ...], right: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(left), len(right))
    return left + (0,) * (width - len(left)), right + (0,) * (width - len(right))


def compare_versions(left: str, right: str) -> int:
    """-1, 0 or 1 as release ``left`` is older than, equal to or newer than ``right`` (3.11 == 3.11.0)."""
    a, b = _padded(version_tuple(left), version_tuple(right))
    return (a > b) - (a < b)


def _prefix_match(version: str, prefix: str) -> bool:
    have = version_tuple(version)
    want = version_tuple(prefix)
    return have[:len(want)] + (0,) * max(0, len(want) - len(have)) == want


def _clause_allows(version: str, operator: str, wanted: str) -> bool:
    if operator in ("==", "!=") and wanted.endswith(".*"):
        matches = _prefix_match(version, wanted[:-2])
        return matches if operator == "==" else not matches
    if operator == "~=":
        release = version_tuple(wanted)
        if len(release) < 2:
            raise ValueError("~=%s needs at least two release parts (PEP 440)" % wanted)
        return compare_versions(version, wanted) >= 0 and _prefix_match(version, ".".join(map(str, release[:-1])))
    order = compare_versions(version, wanted)
    return {
        "==": order == 0, "===": order == 0, "!=": order != 0,
        "<": order < 0, "<=": order <= 0, ">": order > 0, ">=": order >= 0,
    }[operator]


def specifier_allows(version: str, specifier: str) -> bool:
    """Whether a PEP 440 specifier set such as ``>=3.11`` or ``>=3.10,<3.14`` allows ``version``.

    Only what a wheel's ``Requires-Python`` uses is understood (comparison operators, ``~=``,
    ``==X.*``); anything else raises ValueError, so an unreadable requirement is reported, not passed.
    """
    clauses = [part for part in str(specifier).split(",") if part.strip()]
    if not clauses:
        raise ValueError("the specifier is empty")
    for clause in clauses:
        match = _SPEC.match(clause)
        if not match:
            raise ValueError("cannot read %r (expected clauses such as >=3.11 or <3.14)" % clause.strip())
        if not _clause_allows(version, match.group(1), match.group(2)):
            return False
    return True


def python_problem(facts: dict[str, Any]) -> str | None:
    """sglang_install_python against SGLang's Requires-Python, checked before the venv is created."""
    python = facts.get("python") or "sglang_install_python"
    version = str(facts.get("python_version") or "").strip()
    requires = str(facts.get("requires_python") or "").strip()
    sglang = facts.get("sglang_version") or "?"
    fix = ("install a Python that matches (for example the distribution's python3.11 or newer) and set "
           "sglang_install_python to its path; the versioned venv is created from that interpreter")
    if not requires:
        return None
    if not version:
        return "%s is missing or does not run (%s): SGLang %s needs Python %s to create its venv; %s" % (
            python, facts.get("python_error") or "no version printed", sglang, requires, fix)
    try:
        allowed = specifier_allows(version, requires)
    except ValueError as exc:
        return "cannot judge Python %s against SGLang %s's Requires-Python %r: %s; fix the role's release file" % (
            version, sglang, requires, exc)
    if allowed:
        return None
    return "%s is Python %s; SGLang %s requires Python %s (Requires-Python of its wheel): %s" % (
        python, version, sglang, requires, fix)


def driver_problem(facts: dict[str, Any]) -> str | None:
    """The host's NVIDIA driver against the minimum of the CUDA build the pinned torch uses."""
    driver = str(facts.get("driver_version") or "").strip()
    minimum = str(facts.get("min_driver") or "").strip()
    if not driver or not minimum:
        return None
    try:
        too_old = compare_versions(driver, minimum) < 0
    except ValueError as exc:
        return "cannot compare the NVIDIA driver version %r with %s: %s" % (driver, minimum, exc)
    if not too_old:
        return None
    return ("the NVIDIA driver is %s; SGLang %s pins torch %s, built for CUDA %s, which needs driver %s or newer "
            "(NVIDIA's CUDA compatibility table): upgrade the driver on this host (the %s branch or newer) before "
            "serving this version, or keep an sglang_version whose torch build this driver runs; sglang_device_check: false "
            "skips this check" % (
                driver, facts.get("sglang_version") or "?", facts.get("torch") or "?", facts.get("cuda") or "?",
                minimum, minimum.split(".", maxsplit=1)[0]))


def device_problems(facts: dict[str, Any]) -> list[str]:
    """/dev/nvidia-uvm and, with MIG on, /dev/nvidia-caps, for a unit with NoNewPrivileges=yes.

    CUDA creates missing device nodes by running the setuid nvidia-modprobe, which NoNewPrivileges
    turns into a plain unprivileged exec that fails. When the host has nvidia-modprobe the unit
    runs it first with full privileges (``ExecStartPre=+... -u -c0``), which loads nvidia-uvm and
    creates /dev/nvidia-uvm; without it the node must already exist. ``-u -c0`` creates no MIG
    capability node, so /dev/nvidia-caps is required whenever MIG is on.
    """
    problems = []
    if not facts.get("nvidia_modprobe") and not facts.get("uvm"):
        problems.append(
            "/dev/nvidia-uvm is missing and this host has no nvidia-modprobe: the unit runs with NoNewPrivileges=yes, "
            "so CUDA cannot create it at start. Load the module and create the node as root at boot (`modprobe "
            "nvidia-uvm` and `mknod -m 666 /dev/nvidia-uvm c <major of nvidia-uvm in /proc/devices> 0`, as NVIDIA's "
            "CUDA installation guide shows), or install nvidia-modprobe (the unit then runs `nvidia-modprobe -u -c0` "
            "before the server); sglang_device_check: false skips this check")
    if facts.get("mig") and not facts.get("caps"):
        problems.append(
            "MIG is on but /dev/nvidia-caps is missing: with NoNewPrivileges=yes CUDA cannot create the MIG capability "
            "nodes at start. Create them as root (`nvidia-modprobe -f` with each capability file under "
            "/proc/driver/nvidia/capabilities that the server's MIG instances use; NVIDIA MIG user guide, "
            "\"Device Nodes and Capabilities\") or disable MIG; sglang_device_check: false skips this check")
    return problems


def home_root(path: str) -> str | None:
    """The ProtectHome root that hides ``path`` (itself or an ancestor), or None."""
    path = "/" + str(path).strip().strip("/")
    for root in PROTECTED_HOME_ROOTS:
        if path == root or path.startswith(root + "/"):
            return root
    return None


def home_problems(facts: dict[str, Any]) -> list[str]:
    """Paths the service must read that ProtectHome=yes would hide (the start would fail, or find nothing)."""
    if not facts.get("protect_home", True):
        return []
    problems, seen = [], set()
    for name, path in (facts.get("paths") or {}).items():
        root = home_root(path) if path else None
        if root and path not in seen:
            seen.add(path)
            problems.append(
                "%s is %s, under %s, which the unit's ProtectHome=yes hides from the server: move it outside %s "
                "(for example under /opt or /srv) or set sglang_protect_home: false (the unit then uses "
                "ProtectHome=read-only)" % (name, path, root, root))
    return problems


def host_problems(facts: dict[str, Any]) -> list[str]:
    """Every problem the given facts show; each check runs only when its facts are present."""
    problems = []
    if "python_version" in facts:
        problems.append(python_problem(facts))
    if "driver_version" in facts:
        problems.append(driver_problem(facts))
    if "uvm" in facts:
        problems.extend(device_problems(facts))
    if "paths" in facts:
        problems.extend(home_problems(facts))
    return [problem for problem in problems if problem]
