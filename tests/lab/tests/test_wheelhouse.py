"""The offline wheelhouse: both sets install with --no-index into fresh venvs and do their job.

Skipped only when the wheelhouse was never built (`python tests/lab/wheelhouse.py build`; the
Makefile does it first). A wheelhouse built from other requirement files fails: it is stale.
The SGLang venv (~2.2 GiB, ~1 min to install) is made once per requirements hash under
$GPUFLEET_LAB_CACHE/venvs/ and reused by later runs; it is only ever made by the offline install.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import wheelhouse as wh  # noqa: E402

CACHE = wh.cache_dir()


def _require_current(name: str) -> Path:
    directory = wh.set_dir(name)
    state = wh.stamp_state(wh.SETS[name])
    if state == "missing":
        pytest.skip(f"{name} wheelhouse not built: run `python tests/lab/wheelhouse.py build`")
    assert state == "ok", (f"{name} wheelhouse at {directory} is stale (requirements changed since "
                           f"it was built): run `python tests/lab/wheelhouse.py build`")
    return directory


def _run(python: Path, code: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(wh.offline_prefix() + [str(python), "-c", code, *args], env=wh.offline_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False)
    if check:
        assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc


def _installed(python: Path) -> dict[str, str]:
    out = _run(python, "import json, importlib.metadata as md; print(json.dumps("
                       "{d.metadata['Name']: d.version for d in md.distributions()}))").stdout
    return {wh.normalize(n): v for n, v in json.loads(out).items()}


# ---------------------------------------------------------------- static checks (fast)

def test_sglang_requirements_are_complete_exact_pins():
    req = wh.SETS["sglang"].req()
    assert req.other == [], f"lines that are not name==version: {req.other}"
    assert req.pins["torch"].endswith("+cpu"), "torch must be the CPU build"
    assert req.nodeps == ["sglang==0.5.23"]
    assert "sglang" not in req.pins, "sglang must not be installed with its dependencies"
    # What importing sglang.srt.server_args / spec_info loads (requirements/sglang-host.txt).
    imported = ["torch", "triton", "numpy", "psutil", "orjson", "pybase64", "requests", "packaging",
                "pillow", "starlette", "msgspec", "pydantic", "pyzmq", "tqdm", "ipython", "aiohttp",
                "pyyaml"]
    assert [n for n in imported if n not in req.pins] == []


def test_install_commands_are_offline_and_self_contained():
    cmds = wh.install_commands("/opt/sglang/0.5.23/bin/python", "/mnt/wheelhouse")
    assert len(cmds) == 2
    for cmd in cmds:
        assert cmd[:3] == ["/opt/sglang/0.5.23/bin/python", "-m", "pip"]
        assert "--isolated" in cmd and "--no-index" in cmd
        assert cmd[cmd.index("--find-links") + 1] == "/mnt/wheelhouse"
        assert not any("://" in part for part in cmd)
    # Everything the chroot needs is under the wheelhouse dir: no path into the checkout.
    assert cmds[0][-2:] == ["-r", "/mnt/wheelhouse/requirements/sglang-host.txt"]
    assert cmds[1][-2:] == ["--no-deps", "sglang==0.5.23"]
    assert "--no-deps" not in cmds[0]


def test_wheel_tag_filter():
    fits = wh.wheel_fits_target
    assert fits("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert fits("psutil-7.2.2-cp36-abi3-manylinux2010_x86_64.manylinux_2_12_x86_64.whl")
    assert fits("ptyprocess-0.7.0-py2.py3-none-any.whl")
    assert not fits("numpy-2.4.6-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert not fits("foo-1.0-cp311-cp311-manylinux_2_39_x86_64.whl")      # glibc newer than bookworm
    assert not fits("foo-1.0-cp311-cp311-manylinux_2_28_aarch64.whl")
    assert not fits("foo-1.0-cp311-cp311-linux_x86_64.whl")


def test_completeness_check_rejects_unpinned_and_flattens_includes(tmp_path):
    inc = tmp_path / "inc.txt"
    inc.write_text("b==2.0\n")
    req_file = tmp_path / "req.txt"
    req_file.write_text("a==1.0  # why\n-r inc.txt\n# no-deps: c==3.0\n")
    req = wh.read_requirements(req_file)
    assert req.pins == {"a": "1.0", "b": "2.0"} and req.nodeps == ["c==3.0"] and req.other == []
    ws = wh.WheelSet("t", req_file, exact=True, check="")
    hash_before = ws.recipe_hash()
    inc.write_text("b==2.1\n")
    assert ws.recipe_hash() != hash_before, "an included file is part of the stamp key"
    wheels = tmp_path / "w"
    wheels.mkdir()
    for name in ("a-1.0-py3-none-any.whl", "b-2.1-py3-none-any.whl", "c-3.0-py3-none-any.whl"):
        (wheels / name).touch()
    wh._check_complete(ws, wh.read_requirements(req_file), wheels)
    (wheels / "d-4.0-py3-none-any.whl").touch()
    with pytest.raises(wh.WheelhouseError, match="d==4.0"):
        wh._check_complete(ws, wh.read_requirements(req_file), wheels)
    req_file.write_text("a>=1.0\n")
    with pytest.raises(wh.WheelhouseError, match="name==version"):
        wh._check_exact_pins(wh.read_requirements(req_file))
    req_file.write_text("torch==2.13.0\n")
    with pytest.raises(wh.WheelhouseError, match="CPU build"):
        wh._check_exact_pins(wh.read_requirements(req_file))


@pytest.mark.parametrize("name", sorted(wh.SETS))
def test_wheelhouse_matches_target_and_stamp(name):
    directory = _require_current(name)
    stamp = wh.read_stamp(directory)
    wheels = wh.wheels_in(directory)
    assert sorted(w.name for w in wheels) == sorted(stamp["wheels"])
    assert [w.name for w in wheels if not wh.wheel_fits_target(w.name)] == []
    if name == "sglang":
        versions = {wh.parse_wheel(w.name)[0]: wh.parse_wheel(w.name)[1] for w in wheels}
        req = wh.SETS[name].req()
        assert versions == {**req.pins, "sglang": "0.5.23"}
        assert not any(n.startswith("nvidia") for n in versions)


def test_build_is_idempotent():
    directory = _require_current("tools")
    before = (directory / wh.STAMP).read_text()
    # "up to date" per set and an unchanged stamp say nothing was rebuilt; no timing assertion
    # (a shared, noisy machine).
    proc = subprocess.run([sys.executable, str(Path(wh.__file__)), "build"], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("up to date") == len(wh.SETS), proc.stdout
    assert (directory / wh.STAMP).read_text() == before


def test_tools_archive_holds_the_sets_wheels_at_its_top_level():
    """tools.tar, what the lab's targets give the model role: the set's wheels, top level, 0644."""
    directory = _require_current("tools")
    assert wh.archive_set("tools") is False, "build wrote the archive; a second look finds it current"
    with tarfile.open(wh.archive_path("tools")) as tar:
        members = tar.getmembers()
    assert [(m.name, m.size) for m in members] == [(w.name, w.stat().st_size) for w in wh.wheels_in(directory)]
    assert all(m.isfile() and m.mode == 0o644 and "/" not in m.name for m in members)


def test_archive_follows_the_sets_wheels(tmp_path):
    """Written when missing, left alone while current, rewritten once the wheels change or it is unreadable."""
    directory = wh.set_dir("tools", tmp_path)
    directory.mkdir(parents=True)
    (directory / "a-1.0-py3-none-any.whl").write_bytes(b"a" * 10)
    (directory / "requirements").mkdir()  # not a wheel: not in the archive
    assert wh.archive_set("tools", tmp_path) is True
    assert wh.archive_set("tools", tmp_path) is False
    (directory / "b-2.0-py3-none-any.whl").write_bytes(b"b" * 20)
    assert wh.archive_set("tools", tmp_path) is True
    os.utime(directory / "a-1.0-py3-none-any.whl", (1_000_000_000, 1_000_000_000))  # the same wheel made again
    assert wh.archive_set("tools", tmp_path) is True
    assert wh.archive_set("tools", tmp_path) is False
    wh.archive_path("tools", tmp_path).write_bytes(b"not a tar")
    assert wh.archive_set("tools", tmp_path) is True
    with tarfile.open(wh.archive_path("tools", tmp_path)) as tar:
        assert [(m.name, m.size) for m in tar.getmembers()] == [("a-1.0-py3-none-any.whl", 10), ("b-2.0-py3-none-any.whl", 20)]
        assert tar.extractfile("b-2.0-py3-none-any.whl").read() == b"b" * 20
    assert not list(wh.wheelhouse_root(tmp_path).glob(".*.tmp"))


# ---------------------------------------------------------------- tools set

def test_tools_install_offline_and_import(tmp_path):
    directory = _require_current("tools")
    python = wh.create_venv(tmp_path / "venv")
    wh.run_offline(wh.tools_install_commands(python, directory), "tools install")
    out = _run(python, wh.TOOLS_CHECK).stdout
    pins = wh.SETS["tools"].req().pins
    for name in ("huggingface_hub", "safetensors", "jmespath"):
        assert f"{name} {pins[wh.normalize(name)]}" in out
    installed = _installed(python)
    stamped = {wh.parse_wheel(w)[0] for w in wh.read_stamp(directory)["wheels"]}
    assert stamped <= set(installed), "every wheel of the set is used by the install"


def test_tools_install_fails_without_wheels(tmp_path):
    """The offline install really depends on the wheelhouse: an empty one cannot satisfy it."""
    _require_current("tools")
    empty = tmp_path / "empty"
    (empty / "requirements").mkdir(parents=True)
    shutil.copy(wh.set_dir("tools") / "requirements" / "hosts.txt", empty / "requirements")
    python = wh.create_venv(tmp_path / "venv")
    with pytest.raises(wh.WheelhouseError, match="huggingface"):
        wh.run_offline(wh.tools_install_commands(python, empty), "tools install")


# ---------------------------------------------------------------- sglang set

@pytest.fixture(scope="session")
def sglang_python() -> Path:
    directory = _require_current("sglang")
    key = wh.SETS["sglang"].recipe_hash()
    venvs = CACHE / "venvs"
    venvs.mkdir(parents=True, exist_ok=True)
    venv = venvs / f"sglang-{key}"
    done = venv / ".installed"
    with open(venvs / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            # Venvs of older requirement sets are 2 GiB each: keep only the current one.
            for old in venvs.glob("sglang-*"):
                shutil.rmtree(old)
            python = wh.create_venv(venv)
            wh.run_offline(wh.install_commands(python, directory), "sglang install")
            done.write_text(json.dumps({"wheelhouse": wh.read_stamp(directory)["built"]}))
    return venv / "bin" / "python"


def test_sglang_installed_set_is_exactly_the_pins(sglang_python):
    installed = _installed(sglang_python)
    installed.pop("pip")
    req = wh.SETS["sglang"].req()
    assert installed == {**req.pins, "sglang": "0.5.23"}


def test_sglang_parser_and_enum(sglang_python):
    out = _run(sglang_python, wh.SGLANG_CHECK).stdout.splitlines()
    assert out == ["SpeculativeAlgorithm.DFLASH", "DFLASHX rejected"]


def test_sglang_parser_alone_accepts_dflashx_but_enum_rejects(sglang_python):
    code = """
import argparse
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
p = argparse.ArgumentParser()
ServerArgs.add_cli_args(p)
a = p.parse_args(['--model-path', 'x', '--speculative-algorithm', 'DFLASHX'])
print('parsed', a.speculative_algorithm)
SpeculativeAlgorithm.from_string(a.speculative_algorithm)
"""
    proc = _run(sglang_python, code, check=False)
    assert proc.returncode == 1
    assert "parsed DFLASHX" in proc.stdout
    assert "ValueError: Unknown speculative algorithm name: DFLASHX" in proc.stderr


# SGLang's own --config path: prepare_server_args() does exactly this before parse_args.
CONFIG_PARSE = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
p = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(p)
argv = ConfigArgumentMerger(p).merge_config_with_args(sys.argv[1:])
a = p.parse_args(argv)
keys = ("model_path", "speculative_algorithm", "speculative_draft_model_path", "trust_remote_code",
        "tp_size", "api_key")
print(json.dumps({"argv": argv, "args": {k: getattr(a, k) for k in keys}}))
"""


def test_sglang_yaml_config_dash_keys(sglang_python, tmp_path):
    cfg = tmp_path / "server.yaml"
    cfg.write_text("model-path: /models/target\nspeculative-algorithm: DFLASH\n"
                   "speculative-draft-model-path: /models/drafter\ntrust-remote-code: true\n"
                   "tp-size: 8\napi-key: not-a-secret\n")
    out = json.loads(_run(sglang_python, CONFIG_PARSE, "--config", str(cfg), "--tp-size", "2").stdout)
    assert out["args"] == {"model_path": "/models/target", "speculative_algorithm": "DFLASH",
                           "speculative_draft_model_path": "/models/drafter",
                           "trust_remote_code": True, "tp_size": 2, "api_key": "not-a-secret"}
    # A flag boolean becomes the bare flag; the command line wins over the file.
    assert "--trust-remote-code" in out["argv"]
    assert out["argv"].index("--trust-remote-code") + 1 == out["argv"].index("--tp-size")


def test_sglang_yaml_config_underscore_key_rejected(sglang_python, tmp_path):
    cfg = tmp_path / "server.yaml"
    cfg.write_text("model_path: /models/target\n")
    proc = _run(sglang_python, CONFIG_PARSE, "--model-path", "/m", "--config", str(cfg), check=False)
    assert proc.returncode == 2
    assert "unrecognized arguments: --model_path /models/target" in proc.stderr


def test_install_cli_creates_venv_and_installs(tmp_path):
    """`wheelhouse.py install-<set> --python` (same code path for sglang; tools is the fast set)."""
    _require_current("tools")
    python = tmp_path / "v" / "bin" / "python"
    proc = subprocess.run([sys.executable, str(Path(wh.__file__)), "install-tools", "--python",
                           str(python)], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "jmespath 1.1.0" in _run(python, wh.TOOLS_CHECK).stdout


def test_install_cli_clear_error_without_wheelhouse(tmp_path):
    proc = subprocess.run([sys.executable, str(Path(wh.__file__)), "install-sglang", "--python",
                           str(tmp_path / "v/bin/python"), "--wheelhouse", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 1
    assert "no sglang wheelhouse" in proc.stderr and "Traceback" not in proc.stderr
