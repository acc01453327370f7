# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""model_verify's hashes step: sizes and hashes against the manifest or the Hub, and the stat cache.

Private to the collection: not a public API, may change without notice.

The only write of model_verify is here: ``<path>/.gpufleet/statcache.json`` (full and auto modes,
not in check mode), the stat record of each weight file whose sha256 was hashed, so that ``auto``
re-hashes only files whose stat changed since. In ``auto`` a weight file is vouched for by our own
record, or, while we have none, by hf_snapshot's manifest record; either only when it carries
ctime_ns and matches the file now (_manifest.stat_matches): a record without ctime vouches for nothing.
"""

from __future__ import annotations

import collections
import os
import time
import urllib.parse
from dataclasses import dataclass

from ansible_collections.gpufleet.llm.plugins.module_utils._common import hashing as _hashing
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._common.paths import UnsafePathError, dest_path
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree.strays import is_partial
from ansible_collections.gpufleet.llm.plugins.module_utils._verify.steps import Report, listed

# Files whose hashing depends on the mode when the expected-hash source does not say whether a file
# is LFS (on the Hub every file this large is LFS; everything else is small and always hashed).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx", ".ckpt", ".model")
# Read size per hashing thread. A block that stays in the core's L2 cache between the read's copy
# and the digest hashes page-cached files at ~1.2 GiB/s per core here; _hashing's 8 MiB default
# (tuned for fewer syscalls on cold disks) falls to 0.8-1 GiB/s because each block is evicted
# before it is digested. Cold reads are disk-bound either way.
HASH_BLOCK = 1 << 20
# Seconds to wait for the directory lock before giving up on writing the stat cache: a fetch holding
# it longer means the tree is changing, and a cache not written only costs a re-hash next time.
LOCK_TIMEOUT = 10.0

Expected = collections.namedtuple("Expected", ["size", "sha256", "blob_id", "lfs", "stat"])


@dataclass(frozen=True)
class Tree:
    """The model directory as the steps before the hashes found it."""

    root: str  # absolute path
    path: str  # as the caller gave it, for messages
    files: list  # every file in the tree (_safetensors.walk_files)
    shard_rels: list  # the shards the layout names
    flagged: frozenset  # files an earlier step reported: hashing them again would only repeat the problem
    within: str | None = None  # where symlinks may lead (_verify_steps.Layout.within); None: inside root


@dataclass(frozen=True)
class Source:
    """Where the expected sizes and hashes came from, and what they are."""

    kind: str  # "manifest" or "hub" (the result's expected_from)
    label: str  # how problem lines name it
    expected: dict  # {rel: Expected}
    commit: str | None


def expected_from_manifest(manifest_path: str) -> tuple | None:
    """({rel: Expected}, commit). Raises _manifest.ManifestError; None when there is no manifest."""
    # read_json, not read_manifest(dest): a custom manifest path need not sit in <dest>/.gpufleet.
    data = _manifest.read_json(manifest_path, "manifest")
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
        hub = entry.get("hub_id")
        out[rel] = Expected(entry["size"], sha.lower() if isinstance(sha, str) else None,
                            hub if isinstance(hub, str) else None, entry.get("lfs"), entry.get("stat"))
    return out, data.get("commit")


# What the Hub's listing (_hub/listing.py's list_remote, hf_snapshot's too) reads from its settings.
_ListingSettings = collections.namedtuple("_ListingSettings", [
    "repo_id", "revision", "repo_type", "endpoint", "endpoint_url", "max_tries", "retry_wait", "proxy",
    "validate_certs", "ca_path", "timeout"])


def listing_token(token) -> str | None:
    """The token the listing may send once the Hub asks for it: ``token`` without surrounding
    whitespace, the host's (HF_TOKEN, the token file) when None, none when False."""
    from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub

    if token is False:
        return None
    return _hub.host_token(token if isinstance(token, str) else None)


def expected_from_hub(repo_id: str, *, revision: str | None, endpoint: str | None, token, http=None,
                      allow_patterns=None, ignore_patterns=None) -> tuple:
    """({rel: Expected}, commit) as the Hub lists ``repo_id`` at ``revision`` now, the files
    ``allow_patterns``/``ignore_patterns`` select only (hf_snapshot's semantics).

    The listing is hf_snapshot's (_hub/listing.py's list_remote, one try): a public repo is listed
    without a token, the token (``listing_token``) goes along only after the Hub asks for it, and only
    to the endpoint's origin. ``http``: a ``_hub.HubHTTPConfig`` (proxy, validate_certs, ca_path,
    timeout) for every request; None: the environment's proxy, the system CAs and a 60 s timeout.
    Raises _hub/errors.py's SnapshotError (or the HTTP library's error) when it cannot list.
    """
    # Imported here: huggingface_hub is needed only with repo_id.
    from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
    from ansible_collections.gpufleet.llm.plugins.module_utils._hub.listing import list_remote
    from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree.patterns import matches_patterns

    http = http or _hub.HubHTTPConfig(proxy=None, validate_certs=True, ca_path=None, timeout=60)
    endpoint = endpoint.rstrip("/") if endpoint else None
    settings = _ListingSettings(
        repo_id=repo_id, revision=revision or "main", repo_type="model", endpoint=endpoint,
        endpoint_url=endpoint or os.environ.get("HF_ENDPOINT") or _hub.DEFAULT_ENDPOINT, max_tries=1, retry_wait=0,
        proxy=http.proxy, validate_certs=http.validate_certs, ca_path=http.ca_path, timeout=http.timeout)
    commit, files, _used_token = list_remote(settings, token=listing_token(token), log=lambda line: None)
    out = {}
    for f in files:
        if matches_patterns(f.path, allow_patterns, ignore_patterns):
            out[f.path] = Expected(f.size, f.sha256.lower() if f.sha256 else None, f.blob_id, f.lfs, None)
    return out, commit


def _listing_secrets(token, http) -> list:
    """What a listing error must never show: the token in use (given, or the host's when None) and the
    proxy URL with its password."""
    found = [token if isinstance(token, str) else None]
    if token is None:
        try:
            found.append(listing_token(None))
        except Exception:  # pylint: disable=broad-except
            pass  # an unreadable token file: nothing of the host's to hide
    if http is not None and http.proxy:
        found.append(http.proxy)
        try:
            found.append(urllib.parse.urlsplit(http.proxy).password)
        except ValueError:
            pass
    return found


def load_expected(report: Report, tree: Tree, *, mode: str, manifest: str | None, repo_id: str | None,
                  revision: str | None, endpoint: str | None, token, http=None,
                  patterns: tuple = (None, None)) -> Source | None:
    """The expected sizes and hashes; None (and the hashes check reported) when there are none.

    ``patterns``: (allow_patterns, ignore_patterns) that select the Hub's files (repo_id only).
    """
    if repo_id:
        try:
            expected, commit = expected_from_hub(repo_id, revision=revision, endpoint=endpoint, token=token, http=http,
                                                 allow_patterns=patterns[0], ignore_patterns=patterns[1])
        except Exception as exc:  # pylint: disable=broad-except
            # huggingface_hub raises its own errors, httpx's and OSError; each is one line here.
            # Never the token (given or the host's) or the proxy's credentials in a problem line.
            said = _secrets.mask(str(exc), *_listing_secrets(token, http)).strip()
            said = said.splitlines()[0] if said else ""
            kind = "" if type(exc).__name__ == "SnapshotError" else "%s: " % type(exc).__name__
            report.add("hashes", ["could not list %s at %s from %s (%s%s); check repo_id, revision, endpoint, token "
                                  "and, behind a proxy or a private CA, proxy and ca_path"
                                  % (repo_id, revision or "main", endpoint or "the default endpoint", kind, said)])
            return None
        return Source("hub", "the Hub (%s@%s)" % (repo_id, revision or "main"), expected, commit)
    manifest_path = manifest or os.path.join(_manifest.meta_dir(tree.root), _manifest.MANIFEST)
    try:
        loaded = expected_from_manifest(manifest_path)
    except _manifest.ManifestError as exc:
        report.add("hashes", ["%s; re-run hf_snapshot to rewrite it, or pass repo_id to check against the Hub" % exc])
        return None
    if loaded is None:
        msg = ("no expected hashes for %s: no manifest at %s and no repo_id; fetch with hf_snapshot (it writes the "
               "manifest) or pass repo_id/revision to check against the Hub" % (tree.path, manifest_path))
        if mode == "quick":
            report.add("hashes", warnings=[msg + " (quick mode: structure only)"])
        else:
            report.add("hashes", [msg + ", or use mode=quick"])
        return None
    return Source("manifest", "the manifest", loaded[0], loaded[1])


def is_large(rel: str, exp: Expected) -> bool:
    """A weight file: hashed as the mode says (small files are hashed in every mode)."""
    if exp.lfs is not None:
        return bool(exp.lfs)
    return rel.endswith(WEIGHT_SUFFIXES)


def mismatch_fix(rel: str) -> str:
    if rel.endswith(".py") or rel.endswith(".jinja"):
        return ("custom code that trust_remote_code runs must match what was pinned: re-fetch it (hf_snapshot) "
                "and find out who changed it")
    return "its bytes changed after the fetch: re-fetch it (hf_snapshot)"


class HashRun(object):
    """One pass over the expected files: which to hash, which the stat cache vouches for, what is found.

    ``new_cache`` becomes the stat cache when the run may write it.
    """

    def __init__(self, tree: Tree, source: Source, *, mode: str, statcache: dict) -> None:
        self.tree = tree
        self.source = source
        self.mode = mode
        self.statcache = statcache
        self.problems: list = []
        self.warnings: list = []
        self.to_sha: list = []  # (rel, abs, sha256, large, stat before)
        self.to_git: list = []  # (rel, abs, blob_id)
        self.new_cache: dict = {}
        self.cached = 0
        self.hashed: list = []
        self.bytes_hashed = 0

    def plan(self) -> None:
        """Size-check every expected file and sort it into sha256, git blob id, vouched for or unhashable."""
        for rel in sorted(self.source.expected):
            if rel not in self.tree.flagged:
                self._plan_file(rel, self.source.expected[rel])

    def _plan_file(self, rel: str, exp: Expected) -> None:
        label = self.source.label
        try:
            abs_path = dest_path(self.tree.root, rel, within=self.tree.within)
        except UnsafePathError as exc:
            self.problems.append("%s (listed in %s) is unsafe here: %s; replace a symlink leading out of the tree "
                                 "with the file itself, or re-fetch" % (rel, label, exc))
            return
        try:
            now = _manifest.stat_record(abs_path)
        except OSError:
            self.problems.append("%s is missing (listed in %s); re-fetch it (hf_snapshot)" % (rel, label))
            return
        if not os.path.isfile(abs_path):
            self.problems.append("%s is not a regular file; remove it and re-fetch it (hf_snapshot)" % rel)
            return
        if now["size"] != exp.size:
            self.problems.append("%s is %d bytes, %s says %d: %s"
                                 % (rel, now["size"], label, exp.size, mismatch_fix(rel)))
            return
        large = is_large(rel, exp)
        if exp.sha256:
            if large and self.mode == "quick":
                return
            if not large or self.mode == "full" or not self._vouched(rel, exp, now):
                self.to_sha.append((rel, abs_path, exp.sha256, large, now))
        elif exp.blob_id and not large:
            self.to_git.append((rel, abs_path, exp.blob_id.lower()))
        else:
            self.warnings.append("%s: %s gives no hash for it: not hashed" % (rel, label))

    def _vouched(self, rel: str, exp: Expected, now: dict) -> bool:
        """auto mode: a record says this very version of the file already matched ``exp.sha256``."""
        rec = self.statcache.get(rel)
        if isinstance(rec, dict) and rec.get("sha256") == exp.sha256 and _manifest.stat_matches(rec, now):
            self.new_cache[rel] = rec
        elif rec is None and _manifest.stat_matches(exp.stat, now):
            # hf_snapshot hashed it at this very stat (ctime included) when it fetched it. Only while
            # we have no record of our own: a stale one of ours means the file changed since we hashed it.
            self.new_cache[rel] = dict(now, sha256=exp.sha256, verified_at=time.time(), verified_by="hf_snapshot")
        else:
            return False
        self.cached += 1
        return True

    def hash_sha256(self, workers: int) -> None:
        paths = [item[1] for item in self.to_sha]
        digests = _hashing.sha256_files(paths, workers=workers, block=HASH_BLOCK) if paths else {}
        for rel, abs_path, want, large, before in self.to_sha:
            self.hashed.append(rel)
            self.bytes_hashed += before["size"]
            self._settle_sha(rel, abs_path, want=want, got=digests.get(abs_path), large=large, before=before)

    def _settle_sha(self, rel: str, abs_path: str, *, want: str, got, large: bool, before: dict) -> None:
        label = self.source.label
        if isinstance(got, Exception):
            self.problems.append("%s cannot be read (%s); re-fetch it (hf_snapshot)" % (rel, got))
        elif got != want:
            self.problems.append("%s: sha256 %s..., %s says %s...: %s"
                                 % (rel, got[:16], label, want[:16], mismatch_fix(rel)))
            if large:
                # Remember what we found, so no other record (the manifest's) can vouch for these bytes
                # on the next run; the record's sha256 is the wrong one, so it never vouches either.
                self.new_cache[rel] = dict(before, sha256=got, verified_at=time.time(), verified_by="model_verify",
                                           mismatch=True)
        elif large:
            try:
                after = _manifest.stat_record(abs_path)
            except OSError:
                return
            # Changed while we hashed it: the hash may describe neither version; let the next run redo it.
            if after == before:
                self.new_cache[rel] = dict(before, sha256=want, verified_at=time.time(), verified_by="model_verify")

    def hash_git(self) -> None:
        for rel, abs_path, want in self.to_git:
            self.hashed.append(rel)
            try:
                self.bytes_hashed += os.path.getsize(abs_path)
                got = _hashing.git_blob_sha1(abs_path)
            except OSError as exc:
                self.problems.append("%s cannot be read (%s); re-fetch it (hf_snapshot)" % (rel, exc.strerror or exc))
                continue
            if got != want:
                self.problems.append("%s: git blob id %s, %s says %s: %s"
                                     % (rel, got[:12], self.source.label, want[:12], mismatch_fix(rel)))

    def warn_unlisted(self) -> None:
        """Files the source does not list; partials and unreferenced shards are the stray step's."""
        expected = self.source.expected
        extra = [f for f in self.tree.files if f not in expected and not is_partial(f)
                 and not (f.endswith(".safetensors") and f not in self.tree.shard_rels)]
        if extra:
            self.warnings.append("%d file(s) in the tree that %s does not list: %s"
                                 % (len(extra), self.source.label, listed(extra)))

    def summary(self) -> str:
        source = self.source
        detail = "%s%s: %d file(s) hashed (%d bytes), %d vouched for by the stat cache" % (
            source.label, " commit %s" % source.commit if source.commit else "", len(self.hashed), self.bytes_hashed,
            self.cached)
        if self.mode == "quick":
            n_large = sum(1 for rel, exp in source.expected.items() if is_large(rel, exp))
            detail += ", %d weight file(s) not hashed (quick: sizes only)" % n_large
        return detail


def check_hashes(report: Report, tree: Tree, *, mode: str, manifest: str | None = None, repo_id: str | None = None,
                 revision: str | None = None, endpoint: str | None = None, token=None, http=None,
                 hash_workers: int | None = None,
                 allow_stray: bool = False, check_mode: bool = False, allow_patterns=None,
                 ignore_patterns=None) -> dict:
    """The hashes step: every listed file's size, and its hash as ``mode`` says.

    ``allow_patterns``/``ignore_patterns`` select which of the Hub's files (with ``repo_id``) are expected.

    Returns the result fields it knows (``expected_from``, ``commit``, ``hashed``, ``bytes_hashed``,
    ``cached``, ``files_checked``); none when there are no expected hashes.
    """
    source = load_expected(report, tree, mode=mode, manifest=manifest, repo_id=repo_id, revision=revision,
                           endpoint=endpoint, token=token, http=http, patterns=(allow_patterns, ignore_patterns))
    if source is None:
        return {}
    statcache = _read_statcache(report, tree.root) if mode != "quick" else {}
    run = HashRun(tree, source, mode=mode, statcache=statcache)
    run.plan()
    run.hash_sha256(hash_workers or _hashing.default_workers())
    run.hash_git()
    if not allow_stray:
        run.warn_unlisted()
    report.add("hashes", run.problems, warnings=run.warnings, context=run.summary())
    if mode != "quick" and not check_mode:
        save_statcache(report, tree.root, old=statcache, new=run.new_cache)
    return {"expected_from": source.kind, "commit": source.commit, "hashed": sorted(run.hashed),
            "bytes_hashed": run.bytes_hashed, "cached": run.cached, "files_checked": len(source.expected)}


def _read_statcache(report: Report, root: str) -> dict:
    try:
        return _manifest.read_statcache(root)
    except _manifest.ManifestError as exc:
        report.warnings.append("stat cache ignored (%s): every weight file is hashed this time" % exc)
        return {}


def save_statcache(report: Report, root: str, *, old: dict, new: dict) -> None:
    """Write ``new`` under the directory lock unless it equals ``old``; a failure is a warning."""
    if new == old or (not new and not old):
        return
    try:
        with _manifest.DirLock(root, timeout=LOCK_TIMEOUT, option=None):
            _manifest.write_statcache(root, new)
    except (OSError, _manifest.LockTimeout) as exc:
        report.warnings.append("stat cache not updated (%s): the next auto run hashes those files again" % exc)
