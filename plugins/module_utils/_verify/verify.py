# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""model_verify's logic: its options, every check on one model directory in order, and the report.

Private to the collection: not a public API, may change without notice.

Where each part lives:

- here: the argument spec (the module's and the defaults of ``verify``/``check_params``), parameter
  checks, the errors the module fails with, and ``verify``, which runs the steps in order;
- ``_verify_steps``: config, required files, layout, strays, headers, tensors, drafter, and the Report;
- ``_verify_hashes``: expected sizes and hashes (manifest or Hub), hashing and the stat cache.

Never writes a model file. The only write is ``<path>/.gpufleet/statcache.json`` (full and auto
modes, not in check mode): the stat record of each weight file whose sha256 was hashed and matched,
so that ``auto`` re-hashes only files whose (size, mtime, ctime, inode) changed since; a record
without ctime vouches for nothing (_manifest.stat_matches). A ``<path>/.gpufleet`` that is a
symlink (or whose manifest, stat cache or lock is one) is refused before anything is read there.

Costs by mode: ``quick`` reads config, index and shard headers (safetensors memory-maps a shard and
parses only its header) and hashes only the small files, so its cost does not grow with the weights;
``full`` hashes every file; ``auto`` hashes small files plus the weight files the stat cache cannot
vouch for.
"""

from __future__ import annotations

import collections
import os
import time
import traceback
import typing as t

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.gpufleet.llm.plugins.module_utils._verify import expect as _expect
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import safetensors as _st
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import steps as _steps
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.module_utils._verify.hashes import Tree, check_hashes

MODES = ("quick", "full", "auto")


def argument_spec() -> dict:
    """model_verify's argument_spec: the module's, and every default of ``verify``/``check_params``."""
    return dict(
        path=dict(type="path", required=True),
        mode=dict(type="str", choices=list(MODES), default="auto"),
        expect=dict(type="dict"),
        target=dict(type="path"),
        require_files=dict(type="list", elements="str"),
        manifest=dict(type="path"),
        repo_id=dict(type="str"),
        revision=dict(type="str"),
        endpoint=dict(type="str"),
        token=dict(type="str", no_log=True),
        proxy=dict(type="str", no_log=True),  # may carry user:password
        validate_certs=dict(type="bool", default=True),
        ca_path=dict(type="path"),
        timeout=dict(type="int", default=60),
        allow_patterns=dict(type="list", elements="str"),
        ignore_patterns=dict(type="list", elements="str"),
        hash_workers=dict(type="int"),
        allow_stray=dict(type="bool", default=False),
        fail_on_problem=dict(type="bool", default=True),
    )


# One field per option of the spec, so a Python caller (tests, the benchmark) cannot drift from it.
Options = collections.namedtuple("Options", list(argument_spec()))


def options(**params: t.Any) -> Options:
    """The spec's defaults overlaid with ``params``; TypeError names an option the spec does not have."""
    spec = argument_spec()
    unknown = sorted(set(params) - set(spec))
    if unknown:
        raise TypeError("model_verify has no option %s" % ", ".join(unknown))
    values = {name: entry.get("default") for name, entry in spec.items()}
    values.update(params)
    return Options(**values)


class VerifyError(ModuleFailure):
    """A run that cannot start; ``fail_kwargs()`` is what the module fails with."""


class ParamError(VerifyError, ValueError):
    """A parameter that cannot be used; the message says which and how to fix it."""


class MissingLibrary(VerifyError):
    """A library this run needs is not importable by the host's Python."""

    def __init__(self, library: str, import_traceback: str | None) -> None:
        super().__init__(missing_required_lib(library), exception=import_traceback)
        self.library = library
        self.import_traceback = import_traceback


def missing_libraries(expect=None, repo_id: str | None = None) -> list:
    """[(library, import traceback)] this run needs and the host's Python lacks."""
    missing = []
    if not _st.HAS_SAFETENSORS:
        missing.append(("safetensors", _st.SAFETENSORS_IMPORT_ERROR))
    if not _st.HAS_NUMPY:
        missing.append(("numpy", _st.NUMPY_IMPORT_ERROR))
    if expect and not _expect.HAS_JMESPATH:
        missing.append(("jmespath", _expect.JMESPATH_IMPORT_ERROR))
    if repo_id:
        try:
            import huggingface_hub  # noqa: F401  pylint: disable=unused-import
        except ImportError:
            missing.append(("huggingface_hub", traceback.format_exc()))
    return missing


def check_params(**params: t.Any) -> list:
    """Validate what argument_spec cannot; returns the compiled expectations. Raises ParamError.

    ``params``: options of the spec by name; the others take the spec's defaults.
    """
    opts = options(**params)
    if opts.mode not in MODES:
        raise ParamError("mode must be one of %s, got %r" % (", ".join(MODES), opts.mode))
    workers = opts.hash_workers
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ParamError("hash_workers must be a positive integer (default: the number of cores), got %r"
                         % (workers,))
    for pattern in opts.require_files or []:
        if not isinstance(pattern, str) or not pattern or os.path.isabs(pattern) or ".." in pattern.split("/"):
            raise ParamError("require_files entries are globs relative to path without '..', got %r" % (pattern,))
    hub_only = [name for name in ("revision", "endpoint", "token", "proxy", "ca_path") if getattr(opts, name)]
    if not opts.validate_certs:
        hub_only.append("validate_certs")
    if hub_only and not opts.repo_id:
        raise ParamError("%s only apply with repo_id (expected hashes from the Hub); set repo_id or drop them"
                         % ", ".join(hub_only))
    _check_hub_options(opts)
    _check_patterns(opts)
    try:
        return _expect.compile_expectations(opts.expect)
    except _expect.ExpectError as exc:
        raise ParamError(str(exc))


def _check_hub_options(opts: Options) -> None:
    """proxy, ca_path and timeout as hf_snapshot takes them: refused here, not as minutes of retries."""
    if isinstance(opts.timeout, bool) or not isinstance(opts.timeout, int) or opts.timeout < 1:
        raise ParamError("timeout must be a whole number of seconds of at least 1 (how long a silent Hub request "
                         "may take before the listing gives up), got %r" % (opts.timeout,))
    if not opts.repo_id:
        return
    # Imported here: _hub is needed only with repo_id (its checks use the standard library only).
    from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub

    for problem in (opts.ca_path and _hub.ca_path_problem(opts.ca_path), opts.proxy and _hub.proxy_problem(opts.proxy),
                    _hub.endpoint_problem(opts.endpoint, "endpoint"),
                    opts.token is not False and _hub.host_token_problem(opts.token if isinstance(opts.token, str) else None)):
        if problem:
            raise ParamError(problem)


def _check_patterns(opts: Options) -> None:
    """allow_patterns/ignore_patterns: non-empty strings, and only with repo_id."""
    for name in ("allow_patterns", "ignore_patterns"):
        patterns = getattr(opts, name)
        if patterns is None:
            continue
        if not opts.repo_id:
            # A manifest lists what hf_snapshot fetched (its patterns applied); only the Hub lists more.
            raise ParamError("%s selects files of the Hub's listing and only applies with repo_id; set repo_id "
                             "or drop it" % name)
        if isinstance(patterns, str) or not all(isinstance(p, str) and p for p in patterns):
            raise ParamError("%s must be a list of non-empty glob strings (as hf_snapshot's), got %r" % (name, patterns))


def verify(path: str, *, check_mode: bool = False, expectations: list | None = None, **params: t.Any) -> dict:
    """Run every check on the model at ``path``; returns the result dict (see the module's RETURN).

    ``params``: options of the spec by name (``fail_on_problem`` is the module's concern and is
    ignored here). They are assumed validated by check_params: ``expectations`` is its return value;
    when None, ``expect`` is compiled here. Raises VerifyError when ``<path>/.gpufleet`` (or a file of
    ours in it) is a symlink.
    """
    start = time.monotonic()
    opts = options(path=path, **params)
    if expectations is None:
        expectations = check_params(**params)
    report = _steps.Report()
    result = {
        "verified_path": path, "mode": opts.mode, "shards": 0, "tensors": 0, "total_size": None, "bytes_hashed": 0,
        "hashed": [], "cached": 0, "files_checked": 0, "expected_from": None, "commit": None, "config": {},
    }
    root = os.path.abspath(path)
    if not os.path.isdir(root):
        what = "does not exist" if not os.path.lexists(root) else "is not a directory"
        report.add("path", ["path %s %s; fetch the model there first (hf_snapshot) or fix path" % (path, what)])
        return _finish(result, report, start)
    try:
        # Before anything is read or written there: a linked .gpufleet could hold any manifest, and the
        # stat cache and lock would be written wherever it points.
        _manifest.refuse_symlinked_meta(root, "model_verify")
    except _manifest.SymlinkedMetaError as exc:
        raise VerifyError(str(exc))

    config, fields = _steps.check_config(report, root, expectations)
    result.update(fields)
    _steps.check_required_files(report, root, path, opts.require_files)
    layout = _steps.check_layout(report, root, path)
    result["shards"] = len(layout.shard_rels)
    files = _st.walk_files(root)
    _steps.check_strays(report, layout, files, allow_stray=opts.allow_stray)
    parsed, flagged = _steps.check_headers(report, root, layout)
    result.update(_steps.check_tensors(report, layout, parsed))
    tree = Tree(root=root, path=path, files=files, shard_rels=layout.shard_rels, flagged=frozenset(flagged),
                within=layout.within)
    result.update(check_hashes(
        report, tree, mode=opts.mode, manifest=opts.manifest, repo_id=opts.repo_id, revision=opts.revision,
        endpoint=opts.endpoint, token=opts.token, http=_hub_http(opts), hash_workers=opts.hash_workers,
        allow_stray=opts.allow_stray,
        check_mode=check_mode, allow_patterns=opts.allow_patterns, ignore_patterns=opts.ignore_patterns))
    if opts.target:
        result.update(_steps.check_drafter(report, config, opts.target))
    return _finish(result, report, start)


def _hub_http(opts: Options) -> t.Any:
    """How the listing reaches the Hub (None without repo_id: nothing is listed)."""
    if not opts.repo_id:
        return None
    from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub

    return _hub.HubHTTPConfig(proxy=opts.proxy, validate_certs=opts.validate_certs, ca_path=opts.ca_path,
                              timeout=opts.timeout)


def _finish(result: dict, report: _steps.Report, start: float) -> dict:
    result["checks"] = report.checks
    result["problems"] = report.problems
    result["notices"] = report.warnings
    result["ok"] = not report.problems
    result["duration"] = round(time.monotonic() - start, 6)
    return result


def run_module(params: dict, *, check_mode: bool) -> dict:
    """The module's run on its validated ``params``: the result dict with ``changed`` (never True).

    Raises VerifyError (MissingLibrary, ParamError) before any file is read; VerifyError when
    ``<path>/.gpufleet`` or a file of ours in it is a symlink.
    """
    for library, import_traceback in missing_libraries(expect=params["expect"], repo_id=params["repo_id"]):
        raise MissingLibrary(library, import_traceback)
    expectations = check_params(**params)
    checked = {name: value for name, value in params.items() if name != "path"}
    result = verify(params["path"], check_mode=check_mode, expectations=expectations, **checked)
    result["changed"] = False
    return result


def failure_message(result: dict) -> str:
    """One message naming every problem: what the module fails with."""
    head = "model_verify found %d problem(s) in %s (mode %s):"
    lines = [head % (len(result["problems"]), result["verified_path"], result["mode"])]
    lines.extend("- " + p for p in result["problems"])
    return "\n".join(lines)
