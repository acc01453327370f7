# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang role's host decisions (issue 11 items 7-8): what the lab, without NVIDIA devices or an
old Python, cannot show. The role feeds these facts through the sglang_host_problems filter."""
from __future__ import annotations

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import host as sh


@pytest.mark.parametrize("text, expected", [
    ("580.95.05", (580, 95, 5)),
    ("3.11.7", (3, 11, 7)),
    ("3.13.0rc2", (3, 13, 0)),
    ("570", (570,)),
    (" 3.12 ", (3, 12)),
])
def test_version_tuple(text, expected):
    assert sh.version_tuple(text) == expected


@pytest.mark.parametrize("text", ["", "N/A", "[N/A]", "v3.11"])
def test_version_tuple_refuses_non_versions(text):
    with pytest.raises(ValueError, match="is not a version"):
        sh.version_tuple(text)


@pytest.mark.parametrize("left, right, expected", [
    ("3.11", "3.11.0", 0),
    ("3.10.14", "3.11", -1),
    ("3.12.1", "3.11.9", 1),
    ("580.65.06", "580.65.6", 0),
    ("570.133.20", "580.65.06", -1),
    ("580.95.05", "580.65.06", 1),
])
def test_compare_versions(left, right, expected):
    assert sh.compare_versions(left, right) == expected


@pytest.mark.parametrize("version, spec, allowed", [
    ("3.11.0", ">=3.11", True),
    ("3.11.7", ">=3.11", True),
    ("3.10.12", ">=3.11", False),  # Debian 12's python3 against SGLang 0.5.23
    ("3.9.2", ">=3.11", False),
    ("3.13.1", ">=3.10,<3.14", True),
    ("3.14.0", ">=3.10,<3.14", False),
    ("3.12.4", "~=3.11", True),
    ("4.0.0", "~=3.11", False),
    ("3.11.2", "==3.11.*", True),
    ("3.12.0", "==3.11.*", False),
    ("3.12.0", "!=3.12.0", False),
    ("3.12.1", "!=3.12.0, >=3.11", True),
    ("3.11.0", ">3.11", False),
    ("3.11.0", "<=3.11", True),
])
def test_specifier_allows(version, spec, allowed):
    assert sh.specifier_allows(version, spec) is allowed


@pytest.mark.parametrize("spec, message", [
    ("", "the specifier is empty"),
    ("python3.11", "cannot read"),
    (">=3.11;linux", "cannot read"),
    ("~=3", "at least two release parts"),
])
def test_specifier_refuses_what_it_cannot_read(spec, message):
    with pytest.raises(ValueError, match=message):
        sh.specifier_allows("3.11.0", spec)


INSTALL = {"python": "/usr/bin/python3", "requires_python": ">=3.11", "sglang_version": "0.5.23"}


def test_python_too_old_is_refused_with_the_fix():
    problems = sh.host_problems(dict(INSTALL, python_version="3.10.12"))
    assert len(problems) == 1
    assert "/usr/bin/python3 is Python 3.10.12; SGLang 0.5.23 requires Python >=3.11" in problems[0]
    assert "set sglang_install_python" in problems[0]


def test_python_new_enough_passes():
    assert sh.host_problems(dict(INSTALL, python_version="3.11.2")) == []
    assert sh.host_problems(dict(INSTALL, python_version="3.13.0")) == []


def test_python_that_does_not_run_is_named():
    problems = sh.host_problems(dict(INSTALL, python_version="", python_error="No such file or directory"))
    assert problems and "/usr/bin/python3 is missing or does not run (No such file or directory)" in problems[0]
    assert "set sglang_install_python" in problems[0]


def test_unreadable_requires_python_is_a_problem_not_a_pass():
    problems = sh.host_problems(dict(INSTALL, python_version="3.9.0", requires_python="python>=3.11"))
    assert problems and "cannot judge Python 3.9.0" in problems[0]


DRIVER = {"sglang_version": "0.5.23", "torch": "2.14.1", "cuda": "13.0", "min_driver": "580.65.06"}


@pytest.mark.parametrize("driver, fits", [
    ("570.133.20", False),  # the lab stand-in's H200 driver: a CUDA 12.8 driver
    ("575.57.08", False),
    ("580.65.06", True),
    ("580.95.05", True),
    ("590.44.01", True),
])
def test_driver_minimum(driver, fits):
    problems = sh.host_problems(dict(DRIVER, driver_version=driver))
    assert (problems == []) is fits
    if not fits:
        assert "the NVIDIA driver is %s" % driver in problems[0]
        assert "torch 2.14.1, built for CUDA 13.0, which needs driver 580.65.06 or newer" in problems[0]
        assert "upgrade the driver" in problems[0]


def test_driver_unknown_or_minimum_unknown_is_not_judged():
    assert sh.host_problems(dict(DRIVER, driver_version=None)) == []
    assert sh.host_problems(dict(DRIVER, driver_version="580.1", min_driver="")) == []


def test_unreadable_driver_version_is_named():
    problems = sh.host_problems(dict(DRIVER, driver_version="[N/A]"))
    assert problems and "cannot compare the NVIDIA driver version '[N/A]'" in problems[0]


@pytest.mark.parametrize("modprobe, uvm, mig, caps, expected", [
    ("/usr/bin/nvidia-modprobe", False, False, False, []),  # the unit creates /dev/nvidia-uvm (ExecStartPre=+)
    ("/usr/bin/nvidia-modprobe", True, False, False, []),
    ("", True, False, False, []),
    ("", False, False, False, ["/dev/nvidia-uvm is missing"]),
    ("", True, True, True, []),
    ("", True, True, False, ["/dev/nvidia-caps is missing"]),
    ("/usr/bin/nvidia-modprobe", True, True, False, ["/dev/nvidia-caps is missing"]),  # -u -c0 makes no caps
    ("", False, True, False, ["/dev/nvidia-uvm is missing", "/dev/nvidia-caps is missing"]),
])
def test_device_nodes(modprobe, uvm, mig, caps, expected):
    problems = sh.host_problems({"nvidia_modprobe": modprobe, "uvm": uvm, "mig": mig, "caps": caps})
    assert len(problems) == len(expected)
    for problem, want in zip(problems, expected):
        assert want in problem
        assert "sglang_device_check: false" in problem
    if expected and "uvm" in expected[0]:
        assert "NoNewPrivileges=yes" in problems[0] and "modprobe nvidia-uvm" in problems[0]


@pytest.mark.parametrize("path, root", [
    ("/home/alice/venvs/sglang", "/home"),
    ("/home", "/home"),
    ("/root/models/kimi", "/root"),
    ("/run/user/1000/x", "/run/user"),
    ("/opt/sglang/0.5.23", None),
    ("/homes/shared/models", None),
    ("/srv/home/models", None),
])
def test_home_root(path, root):
    assert sh.home_root(path) == root


def test_home_paths_are_refused_while_protect_home_is_on():
    facts = {"paths": {"the SGLang venv (sglang_python)": "/home/ops/sglang/0.5.23",
                       "the target model": "/srv/models/kimi/abc",
                       "the drafter": "/root/dflash", "no drafter": ""}}
    problems = sh.host_problems(facts)
    assert len(problems) == 2
    assert "the SGLang venv (sglang_python) is /home/ops/sglang/0.5.23, under /home" in problems[0]
    assert "ProtectHome=yes" in problems[0] and "sglang_protect_home: false" in problems[0]
    assert "the drafter is /root/dflash, under /root" in problems[1]
    assert sh.host_problems(dict(facts, protect_home=False)) == []


def test_no_facts_no_checks():
    assert sh.host_problems({}) == []


def test_a_path_reported_once_and_a_link_into_home_caught():
    problems = sh.host_problems({"paths": {"the target model": "/home/ops/kimi", "the target model (resolved)": "/home/ops/kimi",
                                           "the drafter": "/srv/dflash", "the drafter (resolved)": "/home/ops/dflash"}})
    assert len(problems) == 2
    assert problems[0].startswith("the target model is /home/ops/kimi")
    assert problems[1].startswith("the drafter (resolved) is /home/ops/dflash")
