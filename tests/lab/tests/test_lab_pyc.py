"""The lab hosts' bytecode cache for Ansible's module payloads (tests/lab/hostpy/gpufleet_lab_pyc.py).

Run here with the controller's Python and real zip files laid out as AnsiballZ lays them out (a
new temporary directory per run, `ansible_<module>_payload.zip`); the lab-marked test in
test_lab_hosts.py checks that the hosts' Python loads it.
"""

from __future__ import annotations

import importlib.util
import marshal
import sys
import traceback
import zipfile
import zipimport
from pathlib import Path

import pytest

SHIM = Path(__file__).resolve().parents[1] / "hostpy" / "gpufleet_lab_pyc.py"

SOURCE = '''
def boom():
    def inner():
        raise ValueError("from inside")
    return inner()

VALUE = {value}
'''


@pytest.fixture()
def shim(tmp_path, monkeypatch):
    original = zipimport._compile_source
    spec = importlib.util.spec_from_file_location("gpufleet_lab_pyc_under_test", SHIM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "CACHE_DIR", str(tmp_path / "cache"))
    compiled = []

    def counting(pathname, source):
        compiled.append(pathname)
        return original(pathname, source)

    monkeypatch.setattr(module, "_compile_source", counting)
    module.compiled = compiled
    yield module
    zipimport._compile_source = original
    for name in [n for n in sys.modules if n.startswith("gflabpyc_")]:
        del sys.modules[name]


def payload(tmp_path: Path, run: str, package: str, value: int, name: str = "ansible_ping_payload.zip") -> Path:
    directory = tmp_path / run
    directory.mkdir()
    path = directory / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{package}/__init__.py", "")
        z.writestr(f"{package}/mod.py", SOURCE.format(value=value))
    return path


def load(path: Path, package: str):
    sys.path.insert(0, str(path))
    try:
        return importlib.import_module(f"{package}.mod")
    finally:
        sys.path.remove(str(path))


def test_a_second_run_loads_the_cached_code_under_its_own_file_name(shim, tmp_path):
    assert zipimport._compile_source is shim.compile_source
    first = payload(tmp_path, "run1", "gflabpyc_a", 1)
    mod = load(first, "gflabpyc_a")
    assert mod.VALUE == 1
    # __init__.py and mod.py compiled and stored (Python 3.11's zipimport asks for each module's code
    # twice, once for its file name: the second is already a cache hit)
    assert sorted(set(shim.compiled)) == [str(first / "gflabpyc_a" / n) for n in ("__init__.py", "mod.py")]
    assert len(shim.compiled) == 2
    assert len(list(Path(shim.CACHE_DIR).iterdir())) == 2

    second = payload(tmp_path, "run2", "gflabpyc_b", 1)
    # the same source under another package name and path: the same bytes, so the same key
    mod2 = load(second, "gflabpyc_b")
    assert mod2.VALUE == 1
    assert len(shim.compiled) == 2, "the second run compiled again instead of loading the cache"
    # the nested function's code names the second run's payload, not the first's
    with pytest.raises(ValueError) as info:
        mod2.boom()
    files = [frame.filename for frame in traceback.extract_tb(info.value.__traceback__)[1:]]
    assert files and all(f.startswith(str(second) + "/") for f in files), files
    assert mod2.boom.__code__.co_filename == str(second / "gflabpyc_b" / "mod.py")


def test_changed_source_is_compiled_again(shim, tmp_path):
    load(payload(tmp_path, "run1", "gflabpyc_c", 1), "gflabpyc_c")
    second = payload(tmp_path, "run2", "gflabpyc_d", 2)
    changed = load(second, "gflabpyc_d")
    assert changed.VALUE == 2
    # mod.py again; the (empty, unchanged) __init__.py came from the cache
    assert shim.compiled[2:] == [str(second / "gflabpyc_d" / "mod.py")]


def test_other_zips_are_left_alone(shim, tmp_path):
    mod = load(payload(tmp_path, "run1", "gflabpyc_e", 5, name="library.zip"), "gflabpyc_e")
    assert mod.VALUE == 5
    assert len(shim.compiled) == 4  # each module twice, as Python 3.11's zipimport does, nothing kept
    assert not Path(shim.CACHE_DIR).exists()


def test_an_unreadable_cache_entry_is_compiled_again(shim, tmp_path):
    load(payload(tmp_path, "run1", "gflabpyc_f", 1), "gflabpyc_f")
    for entry in Path(shim.CACHE_DIR).iterdir():
        entry.write_bytes(b"not marshal data")
    mod = load(payload(tmp_path, "run2", "gflabpyc_g", 1), "gflabpyc_g")
    assert mod.VALUE == 1
    assert len(shim.compiled) == 4  # both compiled again (and stored again: the next run loads them)
    assert all(marshal.loads(entry.read_bytes()) for entry in Path(shim.CACHE_DIR).iterdir())
