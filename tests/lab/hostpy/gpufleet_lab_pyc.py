"""Lab hosts only: keep the bytecode that Python compiles from Ansible's module payloads.

AnsiballZ ships a module and its module_utils as source in a zip written to a new temporary
directory for every task, so each module run on a host compiles ansible-core's module_utils again
(zipimport finds no .pyc in the zip and writes none). On the lab's hosts that was a third of a
module run's CPU (`ping`: 215 ms of host CPU per run, 155 ms with this cache), and the integration
lanes are CPU-bound on 2 cores. This file is installed into each lab host's system Python
(`gpufleet_lab_pyc.pth` imports it; hosts.prepare_guest) and wraps zipimport's compile step for
payload zips only: the code object is cached under the sha256 of the source, Python's magic number
and its optimize flag, and every run gets it with its own file name (tracebacks name the run's own
payload). What a module does does not change; only where its bytecode comes from. Other zips,
plain imports and the SGLang venv (no system site-packages) are untouched. Never part of the
collection: real hosts compile as Ansible makes them.
"""
import marshal
import os
import sys
import zipimport

CACHE_DIR = "/var/cache/gpufleet-lab-pyc"
_compile_source = zipimport._compile_source  # pylint: disable=protected-access


def _with_filename(code, filename):
    consts = tuple(_with_filename(c, filename) if isinstance(c, type(code)) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _key(source):
    # imported here, on a payload's first compile, not at start-up: every Python on the host imports this file
    import hashlib  # pylint: disable=import-outside-toplevel
    import importlib.util  # pylint: disable=import-outside-toplevel
    return hashlib.sha256(importlib.util.MAGIC_NUMBER + bytes([sys.flags.optimize]) + b"\0" + source).hexdigest()


def compile_source(pathname, source):
    """zipimport's compile step, cached for AnsiballZ payload zips."""
    if "_payload.zip" + os.sep not in pathname or not isinstance(source, bytes):
        return _compile_source(pathname, source)
    path = os.path.join(CACHE_DIR, _key(source))
    try:
        with open(path, "rb") as f:
            code = marshal.loads(f.read())
    except (OSError, ValueError, EOFError, TypeError):
        code = _compile_source(pathname, source)
        try:
            os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
            tmp = "%s.%d.tmp" % (path, os.getpid())
            with open(tmp, "wb") as f:
                f.write(marshal.dumps(code))
            os.replace(tmp, path)
        except OSError:
            pass
        return code
    return _with_filename(code, pathname)


zipimport._compile_source = compile_source  # pylint: disable=protected-access
