# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""model_verify's logic: every check on one model directory, and the report.

Private to the collection: not a public API, may change without notice.

Never writes a model file. The only write is ``<path>/.gpufleet/statcache.json`` (full and auto
modes, not in check mode): the stat record of each weight file whose sha256 was hashed and matched,
so that ``auto`` re-hashes only files whose (size, mtime, inode, device, ctime) changed since.

Costs by mode: ``quick`` reads config, index and shard headers (safetensors memory-maps a shard and
parses only its header) and hashes only the small files, so its cost does not grow with the weights;
``full`` hashes every file; ``auto`` hashes small files plus the weight files the stat cache cannot
vouch for.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import time
import traceback

from ansible_collections.gpufleet.llm.plugins.module_utils import _dflash, _expect, _hashing, _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils import _safetensors as _st
from ansible_collections.gpufleet.llm.plugins.module_utils._paths import UnsafePathError, dest_path

MODES = ("quick", "full", "auto")
# Files whose hashing depends on the mode when the expected-hash source does not say whether a file
# is LFS (on the Hub every file this large is LFS; everything else is small and always hashed).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx", ".ckpt", ".model")
CONFIG = "config.json"
MAX_LISTED = 5
# Read size per hashing thread. A block that stays in the core's L2 cache between the read's copy
# and the digest hashes page-cached files at ~1.2 GiB/s per core here; _hashing's 8 MiB default
# (tuned for fewer syscalls on cold disks) falls to 0.8-1 GiB/s because each block is evicted
# before it is digested. Cold reads are disk-bound either way.
HASH_BLOCK = 1 << 20

Expected = collections.namedtuple("Expected", ["size", "sha256", "blob_id", "lfs", "stat"])


class ParamError(ValueError):
    """A parameter that cannot be used; the message says which and how to fix it."""


def missing_libraries(expect=None, repo_id=None):
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


def check_params(mode="auto", expect=None, require_files=None, hash_workers=None, repo_id=None, revision=None,
                 endpoint=None, token=None):
    """Validate what argument_spec cannot; returns the compiled expectations. Raises ParamError."""
    if mode not in MODES:
        raise ParamError("mode must be one of %s, got %r" % (", ".join(MODES), mode))
    if hash_workers is not None and (isinstance(hash_workers, bool) or not isinstance(hash_workers, int)
                                     or hash_workers < 1):
        raise ParamError("hash_workers must be a positive integer (default: the number of cores), got %r"
                         % (hash_workers,))
    for pattern in require_files or []:
        if not isinstance(pattern, str) or not pattern or os.path.isabs(pattern) or ".." in pattern.split("/"):
            raise ParamError("require_files entries are globs relative to path without '..', got %r" % (pattern,))
    if (revision or endpoint or token) and not repo_id:
        raise ParamError("revision, endpoint and token only apply with repo_id (expected hashes from the Hub); "
                         "set repo_id or drop them")
    try:
        return _expect.compile_expectations(expect)
    except _expect.ExpectError as exc:
        raise ParamError(str(exc))


class _Report(object):
    """Checks in order, problems (fail the run) and warnings (reported only)."""

    def __init__(self):
        self.checks = []
        self.problems = []
        self.warnings = []

    def add(self, name, problems=(), detail="", warnings=(), skipped=False, context=""):
        """``detail`` describes the passing check; ``context`` (for example where expected hashes came
        from) is kept in front of problems and warnings too."""
        problems = list(problems)
        warnings = list(warnings)
        self.problems.extend(problems)
        self.warnings.extend(warnings)
        lead = context + "; " if context else ""
        if problems:
            status = "failed"
            detail = lead + " | ".join(problems[:MAX_LISTED])
            if len(problems) > MAX_LISTED:
                detail += " | ... and %d more" % (len(problems) - MAX_LISTED)
        elif skipped:
            status = "skipped"
        elif warnings:
            status = "warn"
            detail = lead + " | ".join(warnings[:MAX_LISTED])
        else:
            status = "ok"
            detail = context if context and not detail else detail
        self.checks.append({"name": name, "status": status, "detail": detail})


def _listed(items, limit=MAX_LISTED):
    items = list(items)
    text = ", ".join(items[:limit])
    return text + (" and %d more" % (len(items) - limit) if len(items) > limit else "")


def read_config(root, name=CONFIG):
    """(dict, None) or (None, problem line)."""
    path = os.path.join(root, name)
    label = os.path.join(os.path.basename(os.path.normpath(root)), name) if name != CONFIG else name
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return None, "%s is missing in %s; re-fetch it (hf_snapshot)" % (label, root)
    except OSError as exc:
        return None, "%s cannot be read (%s); re-fetch it (hf_snapshot)" % (label, exc.strerror or exc)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return None, "%s is not valid JSON (%s); re-fetch it (hf_snapshot)" % (label, exc)
    if not isinstance(data, dict):
        return None, "%s is not a JSON object; re-fetch it (hf_snapshot)" % label
    return data, None


def _stat_now(path):
    """_manifest.stat_record plus ctime: rewriting bytes and restoring mtime (touch -d, os.utime)
    still moves ctime, so the stat cache does not vouch for such a file."""
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "dev": st.st_dev,
            "ctime_ns": st.st_ctime_ns}


def _same(record, now):
    if not isinstance(record, dict):
        return False
    for key in ("size", "mtime_ns", "ino", "dev"):
        if record.get(key) != now[key]:
            return False
    return record.get("ctime_ns") in (None, now["ctime_ns"])


def _expected_from_manifest(manifest_path):
    """({rel: Expected}, commit). Raises _manifest.ManifestError; None when there is no manifest."""
    # _read_json is _manifest's own reader (format check included); a custom manifest path is why
    # read_manifest(dest) alone does not do here.
    data = _manifest._read_json(manifest_path, "manifest")  # pylint: disable=protected-access
    if data is None:
        return None
    files = data.get("files")
    if not isinstance(files, dict):
        raise _manifest.ManifestError("manifest %s has no files table" % manifest_path)
    out = {}
    for rel, entry in files.items():
        if not isinstance(entry, dict) or isinstance(entry.get("size"), bool) or not isinstance(entry.get("size"), int):
            raise _manifest.ManifestError("manifest %s: entry for %r has no integer size" % (manifest_path, rel))
        sha = entry.get("sha256")
        out[rel] = Expected(entry["size"], sha.lower() if isinstance(sha, str) else None,
                            entry.get("hub_id"), entry.get("lfs"), entry.get("stat"))
    return out, data.get("commit")


def _expected_from_hub(repo_id, revision, endpoint, token):
    """({rel: Expected}, commit) as the Hub lists ``repo_id`` at ``revision`` now."""
    from ansible_collections.gpufleet.llm.plugins.module_utils import _hub

    api = _hub.hf_api(endpoint=endpoint, token=token)
    commit = _hub.resolve_commit(api, repo_id, revision or "main")
    out = {}
    for f in _hub.list_revision(api, repo_id, commit):
        out[f.path] = Expected(f.size, f.sha256.lower() if f.sha256 else None, f.blob_id, f.lfs, None)
    return out, commit


def _is_large(rel, exp):
    if exp.lfs is not None:
        return bool(exp.lfs)
    return rel.endswith(WEIGHT_SUFFIXES)


def _mismatch_fix(rel):
    if rel.endswith(".py") or rel.endswith(".jinja"):
        return ("custom code that trust_remote_code runs must match what was pinned: re-fetch it (hf_snapshot) "
                "and find out who changed it")
    return "its bytes changed after the fetch: re-fetch it (hf_snapshot)"


def verify(path, mode="auto", expect=None, target=None, require_files=None, manifest=None, repo_id=None,
           revision=None, endpoint=None, token=None, hash_workers=None, allow_stray=False, check_mode=False,
           lock_timeout=10.0, expectations=None):
    """Run every check on the model at ``path``; returns the result dict (see the module's RETURN).

    Parameters are assumed validated by check_params (``expectations`` is its return value; when
    None, ``expect`` is compiled here).
    """
    start = time.monotonic()
    if expectations is None:
        expectations = check_params(mode=mode, expect=expect, require_files=require_files, hash_workers=hash_workers,
                                    repo_id=repo_id, revision=revision, endpoint=endpoint, token=token)
    report = _Report()
    result = {
        "verified_path": path, "mode": mode, "shards": 0, "tensors": 0, "total_size": None, "bytes_hashed": 0,
        "hashed": [], "cached": 0, "files_checked": 0, "expected_from": None, "commit": None, "config": {},
    }
    root = os.path.abspath(path)

    def finish():
        result["checks"] = report.checks
        result["problems"] = report.problems
        result["notices"] = report.warnings
        result["ok"] = not report.problems
        result["duration"] = round(time.monotonic() - start, 6)
        return result

    if not os.path.isdir(root):
        what = "does not exist" if not os.path.lexists(root) else "is not a directory"
        report.add("path", ["path %s %s; fetch the model there first (hf_snapshot) or fix path" % (path, what)])
        return finish()

    # 1. config.json and the expectations over it.
    config, problem = read_config(root)
    report.add("config", [problem] if problem else [], "" if problem else "config.json parses")
    if config is not None:
        result["config"] = _dflash.facts(config)
        if _dflash.is_drafter(config):
            result["config"]["dflash"] = _dflash.drafter_facts(config)
    if expectations:
        if config is None:
            report.add("expect", detail="config.json unusable", skipped=True)
        else:
            details, problems = _expect.evaluate(expectations, config)
            report.add("expect", problems, "%d expectation(s) hold" % len(details) if not problems else "")
            result["expect"] = details

    if require_files:
        problems = []
        for pattern in require_files:
            hits = [h for h in glob.glob(os.path.join(glob.escape(root), pattern), recursive=True) if os.path.isfile(h)]
            if not hits:
                problems.append("no file matches require_files pattern %r in %s; fetch the files (allow_patterns "
                                "of hf_snapshot) or fix require_files" % (pattern, path))
        report.add("require_files", problems, "%d pattern(s) matched" % len(require_files) if not problems else "")

    # 2. Weights layout: the index (or a single file) and what lies in the tree beside it.
    kind, _name = _st.find_weights(root)
    weight_map, total_size, shard_rels = None, None, []
    if kind is None:
        report.add("index", ["no %s or %s in %s: not a safetensors model, or the fetch did not finish; re-fetch it"
                             % (_st.INDEX, _st.SINGLE, path)])
    elif kind == "single":
        shard_rels = [_st.SINGLE]
        report.add("index", detail="single-file model (%s)" % _st.SINGLE)
    else:
        try:
            weight_map, total_size = _st.load_index(root)
        except _st.IndexError_ as exc:
            report.add("index", [str(exc)])
        else:
            shard_rels = sorted(set(weight_map.values()))
            report.add("index", detail="%s: %d tensors in %d shards" % (_st.INDEX, len(weight_map), len(shard_rels)))
    result["shards"] = len(shard_rels)

    all_files = _st.walk_files(root)
    stray = []
    for rel in all_files:
        if _st.is_partial(rel):
            base = rel.rsplit(".", 1)[0]
            if rel.endswith(".aria2"):
                stray.append("%s: stale aria2 control file: the download of %s did not finish (or was abandoned); "
                             "re-fetch %s, then remove %s" % (rel, base, base, rel))
            elif rel.endswith(".incomplete"):
                stray.append("%s: partial download left by huggingface_hub; remove it (hf_snapshot prune) and "
                             "re-fetch what it was" % rel)
            else:
                stray.append("%s: partial download left by a downloader; remove it and re-fetch what it was" % rel)
        elif kind is not None and rel.endswith(".safetensors") and rel not in shard_rels and \
                not (kind == "index" and weight_map is None):
            stray.append("%s: a .safetensors file that %s does not reference (a leftover of another revision or "
                         "download?); remove it, or set allow_stray if it belongs there"
                         % (rel, _st.INDEX if kind == "index" else "this single-file model"))
    if allow_stray:
        report.add("stray", warnings=stray, detail="%d files in the tree, no partials or unreferenced shards"
                   % len(all_files), context="allow_stray")
    else:
        report.add("stray", stray, "%d files in the tree, no partials or unreferenced shards" % len(all_files))

    # 3. Every shard's header and size.
    parsed = {}
    flagged = set()  # files already reported: hashing them again would only repeat the problem
    problems = []
    for rel in shard_rels:
        try:
            shard_path = _st.resolve_shard(root, rel)
            parsed[rel] = _st.inspect_shard(shard_path, rel)
        except _st.ShardError as exc:
            problems.append(str(exc))
            flagged.add(rel)
    if shard_rels:
        report.add("headers", problems, "%d shard header(s) parse, sizes = 8 + header + data" % len(parsed))
    else:
        report.add("headers", detail="no shards", skipped=True)

    # 4. weight_map against the headers, and metadata.total_size.
    data_bytes = sum(s.data_len for s in parsed.values())
    if weight_map is not None:
        result["tensors"] = len(weight_map)
        problems = _st.cross_check(weight_map, {rel: s.tensors for rel, s in parsed.items()})
        report.add("tensors", problems, "every tensor of the weight_map is in its shard's header and vice versa")
        if len(parsed) != len(shard_rels):
            report.add("total_size", detail="not all shards parse", skipped=True)
        elif total_size is None:
            report.add("total_size", warnings=["%s has no metadata.total_size: the sum of tensor bytes cannot be "
                                               "cross-checked" % _st.INDEX])
        elif total_size != data_bytes:
            report.add("total_size", ["%s: metadata.total_size is %d but the shards' tensors sum to %d bytes (off by "
                                      "%+d); the index does not belong to these shards: re-fetch %s"
                                      % (_st.INDEX, total_size, data_bytes, total_size - data_bytes, _st.INDEX)])
        else:
            report.add("total_size", detail="metadata.total_size = %d = sum of tensor bytes" % total_size)
    elif kind == "single":
        result["tensors"] = sum(len(s.tensors) for s in parsed.values())
        report.add("tensors", detail="single-file model: %d tensors" % result["tensors"])
    if len(parsed) == len(shard_rels) and shard_rels:
        result["total_size"] = data_bytes

    # 5. Hashes against the manifest or the Hub.
    _check_hashes(report, result, root, path, mode, manifest, repo_id, revision, endpoint, token, hash_workers,
                  check_mode, lock_timeout, flagged, all_files, shard_rels, allow_stray)

    # 6. A DFlash drafter against its target.
    if target:
        troot = os.path.abspath(target)
        if not os.path.isdir(troot):
            report.add("dflash", ["target %s does not exist or is not a directory; point target at the target model's "
                                  "directory" % target])
        elif config is None:
            report.add("dflash", detail="drafter config.json unusable", skipped=True)
        else:
            tconfig, problem = read_config(troot)
            if tconfig is None:
                report.add("dflash", ["target %s: %s" % (target, problem)])
            else:
                problems = _dflash.check_drafter(config, tconfig, target_name="target %s/config.json" % target)
                t_layers = _dflash.text_value(tconfig, "num_hidden_layers")
                report.add("dflash", problems, "drafter fits target %s (%s layers, hidden %s, vocab %s)"
                           % (target, t_layers, _dflash.text_value(tconfig, "hidden_size"),
                              _dflash.text_value(tconfig, "vocab_size")))
                result["target_config"] = _dflash.facts(tconfig)
    return finish()


def _check_hashes(report, result, root, path, mode, manifest, repo_id, revision, endpoint, token, hash_workers,
                  check_mode, lock_timeout, flagged, all_files, shard_rels, allow_stray):
    manifest_path = manifest or os.path.join(_manifest.meta_dir(root), _manifest.MANIFEST)
    expected = None
    if repo_id:
        source = "the Hub (%s@%s)" % (repo_id, revision or "main")
        try:
            expected, commit = _expected_from_hub(repo_id, revision, endpoint, token)
        except Exception as exc:  # pylint: disable=broad-except
            # huggingface_hub raises its own errors, httpx's and OSError; each is one line here.
            report.add("hashes", ["could not list %s at %s from %s (%s: %s); check repo_id, revision, endpoint and "
                                  "token" % (repo_id, revision or "main", endpoint or "the default endpoint",
                                             type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")])
            return
        result["expected_from"] = "hub"
    else:
        source = "the manifest"
        try:
            loaded = _expected_from_manifest(manifest_path)
        except _manifest.ManifestError as exc:
            report.add("hashes", ["%s; re-run hf_snapshot to rewrite it, or pass repo_id to check against the Hub"
                                  % exc])
            return
        if loaded is None:
            msg = ("no expected hashes for %s: no manifest at %s and no repo_id; fetch with hf_snapshot (it writes the "
                   "manifest) or pass repo_id/revision to check against the Hub" % (path, manifest_path))
            if mode == "quick":
                report.add("hashes", warnings=[msg + " (quick mode: structure only)"])
            else:
                report.add("hashes", [msg + ", or use mode=quick"])
            return
        expected, commit = loaded
        result["expected_from"] = "manifest"
    result["commit"] = commit

    statcache = {}
    if mode != "quick":
        try:
            statcache = _manifest.read_statcache(root)
        except _manifest.ManifestError as exc:
            report.warnings.append("stat cache ignored (%s): every weight file is hashed this time" % exc)

    problems = []
    warnings = []
    to_sha = []  # (rel, abs, sha256, large, stat before)
    to_git = []  # (rel, abs, blob_id)
    new_cache = {}
    cached = 0
    for rel in sorted(expected):
        exp = expected[rel]
        if rel in flagged:
            continue
        try:
            abs_path = dest_path(root, rel)
        except UnsafePathError as exc:
            problems.append("%s (listed in %s) is unsafe here: %s; replace a symlink leading out of the tree with the "
                            "file itself, or re-fetch" % (rel, source, exc))
            continue
        try:
            now = _stat_now(abs_path)
        except OSError:
            problems.append("%s is missing (listed in %s); re-fetch it (hf_snapshot)" % (rel, source))
            continue
        if not os.path.isfile(abs_path):
            problems.append("%s is not a regular file; remove it and re-fetch it (hf_snapshot)" % rel)
            continue
        if now["size"] != exp.size:
            problems.append("%s is %d bytes, %s says %d: %s" % (rel, now["size"], source, exp.size, _mismatch_fix(rel)))
            continue
        large = _is_large(rel, exp)
        if exp.sha256:
            if not large or mode == "full":
                to_sha.append((rel, abs_path, exp.sha256, large, now))
            elif mode == "auto":
                rec = statcache.get(rel)
                if isinstance(rec, dict) and rec.get("sha256") == exp.sha256 and _same(rec, now):
                    new_cache[rel] = rec
                    cached += 1
                elif rec is None and _same(exp.stat, now):
                    # hf_snapshot hashed it at this very stat when it fetched it. Only while we have no
                    # record of our own: ours also holds ctime, and a stale one means the file changed.
                    new_cache[rel] = dict(now, sha256=exp.sha256, verified_at=time.time(), verified_by="hf_snapshot")
                    cached += 1
                else:
                    to_sha.append((rel, abs_path, exp.sha256, large, now))
        elif exp.blob_id and not large:
            to_git.append((rel, abs_path, exp.blob_id.lower()))
        else:
            warnings.append("%s: %s gives no hash for it: not hashed" % (rel, source))

    workers = hash_workers or _hashing.default_workers()
    digests = _hashing.sha256_files([item[1] for item in to_sha], workers=workers, block=HASH_BLOCK) if to_sha else {}
    hashed = []
    bytes_hashed = 0
    for rel, abs_path, want, large, before in to_sha:
        got = digests.get(abs_path)
        hashed.append(rel)
        bytes_hashed += before["size"]
        if isinstance(got, Exception):
            problems.append("%s cannot be read (%s); re-fetch it (hf_snapshot)" % (rel, got))
        elif got != want:
            problems.append("%s: sha256 %s..., %s says %s...: %s" % (rel, got[:16], source, want[:16], _mismatch_fix(rel)))
            if large:
                # Remember what we found: without a record of ours, the manifest's stat record (which has
                # no ctime) could vouch for a file rewritten with its mtime restored on the next run.
                new_cache[rel] = dict(before, sha256=got, verified_at=time.time(), verified_by="model_verify",
                                      mismatch=True)
        elif large:
            try:
                after = _stat_now(abs_path)
            except OSError:
                continue
            # Changed while we hashed it: the hash may describe neither version; let the next run redo it.
            if after == before:
                new_cache[rel] = dict(before, sha256=want, verified_at=time.time(), verified_by="model_verify")
    for rel, abs_path, want in to_git:
        hashed.append(rel)
        try:
            bytes_hashed += os.path.getsize(abs_path)
            got = _hashing.git_blob_sha1(abs_path)
        except OSError as exc:
            problems.append("%s cannot be read (%s); re-fetch it (hf_snapshot)" % (rel, exc.strerror or exc))
            continue
        if got != want:
            problems.append("%s: git blob id %s, %s says %s: %s" % (rel, got[:12], source, want[:12], _mismatch_fix(rel)))

    extra = [f for f in all_files if f not in expected and not _st.is_partial(f)
             and not (f.endswith(".safetensors") and f not in shard_rels)]
    if extra and not allow_stray:
        warnings.append("%d file(s) in the tree that %s does not list: %s" % (len(extra), source, _listed(extra)))

    result["hashed"] = sorted(hashed)
    result["bytes_hashed"] = bytes_hashed
    result["cached"] = cached
    result["files_checked"] = len(expected)
    n_large = sum(1 for rel in expected if _is_large(rel, expected[rel]))
    detail = "%s%s: %d file(s) hashed (%d bytes), %d vouched for by the stat cache" % (
        source, " commit %s" % commit if commit else "", len(hashed), bytes_hashed, cached)
    if mode == "quick":
        detail += ", %d weight file(s) not hashed (quick: sizes only)" % n_large
    report.add("hashes", problems, warnings=warnings, context=detail)

    if mode != "quick" and not check_mode:
        _save_statcache(report, root, statcache, new_cache, lock_timeout)


def _save_statcache(report, root, old, new, lock_timeout):
    if new == old or (not new and not old):
        return
    try:
        with _manifest.DirLock(root, timeout=lock_timeout):
            _manifest.write_statcache(root, new)
    except (OSError, _manifest.LockTimeout) as exc:
        report.warnings.append("stat cache not updated (%s): the next auto run hashes those files again" % exc)


def failure_message(result):
    """One message naming every problem: what the module fails with."""
    head = "model_verify found %d problem(s) in %s (mode %s):"
    lines = [head % (len(result["problems"]), result["verified_path"], result["mode"])]
    lines.extend("- " + p for p in result["problems"])
    return "\n".join(lines)
