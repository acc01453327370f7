# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hf_snapshot's logic: a Hub revision landed in a directory, every file checked, resumable.

Private to the collection: not a public API, may change without notice.

The promise: a file at its final path is whole and verified. Bytes arrive in a staging area
(``<dest>/.gpufleet/staging/``, named by content id, mode 0700) and are renamed into place only
once their hash matched the Hub's (LFS files: sha256; other files: the git blob id, then their
sha256 is recorded). Each file is hashed once, here, in a thread pool, as soon as aria2 reports it
complete, while the other files still download (aria2's own checksum= would hash one file after
another in its single thread, after the transfer). Nothing is ever written in place, so files
hard-linked from an earlier revision (``link_from``) stay intact, and a lost ``.aria2`` control file
can never make a partial look complete (a staging file without one is hashed before it counts).

The token goes only to the endpoint: the Hub's listing API and a HEAD per file that yields the
signed CDN URL aria2 then fetches without any header. Public repos get no token at all.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpufleet.llm.plugins.module_utils import _aria2, _hashing, _hub, _manifest, _paths

STAGING = "staging"
PROGRESS = "progress.json"
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
PARTIAL_SUFFIXES = (".incomplete", ".aria2", ".part", ".partial", ".tmp.download")
MAX_RETRY_AFTER = 600.0
MAX_BACKOFF = 120.0


class SnapshotError(Exception):
    """A failure to report to the operator: ``msg`` names the problem and what to do."""

    def __init__(self, msg, **details):
        super().__init__(msg)
        self.msg = msg
        self.details = details


DEFAULTS = {
    "revision": "main",
    "repo_type": "model",
    "allow_patterns": None,
    "ignore_patterns": None,
    "token": None,
    "endpoint": None,
    "connections": 16,
    "splits": 16,
    # Two files at a time with 16 connections each: 32 connections (twice what a 160 MiB/s link
    # needs at 10 MiB/s per connection), and files finish one pair after another, so hashing a
    # finished pair overlaps the next pair's transfer instead of piling up after the last byte.
    # 8M: a file of 128 MiB or more still gets all 16 connections (aria2 halves ranges down to
    # min_split_size), and idle connections can still take over halves of a slow tail.
    "parallel_files": 2,
    "min_split_size": "8M",
    "max_tries": 5,
    "retry_wait": 2,
    "timeout": 60,
    "link_from": None,
    "prune_partials": False,
    "min_free_bytes": 1 << 30,
    "proxy": None,
    "validate_certs": True,
    "ca_path": None,
    "aria2c": None,
    "lock_timeout": 600,
    "hash_workers": None,
    "progress_interval": 5.0,
    # Who checks an LFS file's sha256. False (default): this module, as soon as aria2's log says the
    # file is complete, in a thread pool while the other files still download. True: aria2's
    # checksum=, which hashes in aria2's single thread, one file after another, after the transfer
    # (measured: ~1.4 s for 1 GiB at the end of the bench's fetch, vs ~0.4 s with two threads).
    # Either way every byte is hashed exactly once before its rename.
    "aria2_checksum": False,
}


def human(nbytes):
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return ("%d %s" % (value, unit)) if unit == "B" else ("%.1f %s" % (value, unit))
        value /= 1024.0
    return "%d B" % nbytes  # pragma: no cover


def content_key(remote):
    """Staging name and dedupe key: files with the same bytes share one fetch."""
    return remote.sha256 if remote.lfs and remote.sha256 else "blob-%s" % remote.blob_id


def matches_patterns(path, allow, ignore):
    """huggingface_hub's allow/ignore semantics (fnmatch; a trailing '/' means the folder)."""

    def norm(patterns):
        if not patterns:
            return None
        if isinstance(patterns, str):
            patterns = [patterns]
        return [p + "*" if p.endswith("/") else p for p in patterns]

    allow, ignore = norm(allow), norm(ignore)
    if allow is not None and not any(fnmatch.fnmatch(path, p) for p in allow):
        return False
    if ignore is not None and any(fnmatch.fnmatch(path, p) for p in ignore):
        return False
    return True


def allocated_bytes(path):
    try:
        st = os.stat(path)
    except OSError:
        return 0
    return min(st.st_size, st.st_blocks * 512)


def free_bytes(path):
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize, probe


# ----------------------------------------------------------------------------- listing


def _http_status(exc):
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _hub_errors():
    from huggingface_hub import errors  # late: the module reports a missing library itself

    return errors


def list_remote(opts, token, log):
    """(commit, [RemoteFile], used_token) with retries on 429/5xx; token only if the repo needs it."""
    errors = _hub_errors()
    attempts = max(1, opts["max_tries"])
    use_token = False
    last = None
    for attempt in range(1, attempts + 1):
        api = _hub.hf_api(endpoint=opts["endpoint"], token=token if use_token else False)
        try:
            commit = _hub.resolve_commit(api, opts["repo_id"], opts["revision"], repo_type=opts["repo_type"])
            files = _hub.list_revision(api, opts["repo_id"], commit, repo_type=opts["repo_type"])
            return commit, files, use_token
        except errors.RevisionNotFoundError:
            raise SnapshotError(
                "revision %r of %s not found on %s: check the branch, tag or commit name"
                % (opts["revision"], opts["repo_id"], opts["endpoint_display"])
            )
        except errors.RepositoryNotFoundError as exc:
            if token and not use_token:
                use_token = True  # private repos look missing without a token: ask again with it
                continue
            raise SnapshotError(
                "repository %s not found on %s%s (%s)"
                % (
                    opts["repo_id"],
                    opts["endpoint_display"],
                    "" if token else ", or private and no token given: set token or HF_TOKEN",
                    _short(exc),
                )
            )
        except errors.HfHubHTTPError as exc:
            status = _http_status(exc)
            if status == 401 and token and not use_token:
                use_token = True
                continue
            if status in (401, 403):
                raise SnapshotError(
                    "the Hub refused to list %s (%s): %s"
                    % (opts["repo_id"], status, "check the token" if use_token else "it needs a token (set token or HF_TOKEN)")
                )
            last = "HTTP %s: %s" % (status, _short(exc))
            if status is not None and status not in (408, 429) and status < 500:
                raise SnapshotError("listing %s@%s failed: %s" % (opts["repo_id"], opts["revision"], last))
        except (OSError, ValueError) as exc:
            last = _short(exc)
        except Exception as exc:  # pylint: disable=broad-except
            # httpx transport errors are not OSErrors; anything else from the client is fatal
            if type(exc).__module__.split(".", maxsplit=1)[0] in ("httpx", "httpx2", "httpcore", "httpcore2"):
                last = "%s: %s" % (type(exc).__name__, _short(exc))
            else:
                raise
        wait = min(MAX_BACKOFF, opts["retry_wait"] * 2 ** (attempt - 1))
        log("listing failed (%s), retry %d/%d in %.0f s" % (last, attempt, attempts, wait))
        if attempt < attempts:
            time.sleep(wait)
    raise SnapshotError(
        "listing %s@%s on %s failed %d times, last: %s"
        % (opts["repo_id"], opts["revision"], opts["endpoint_display"], attempts, last)
    )


def _short(exc):
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


# ----------------------------------------------------------------------------- planning


class Item(object):
    """One remote file and what this run does about it."""

    __slots__ = ("remote", "final", "key", "action", "sha256", "stat", "source", "error", "resumed")

    def __init__(self, remote, final):
        self.remote = remote
        self.final = final
        self.key = content_key(remote)
        self.action = None  # present | link | fetch
        self.sha256 = remote.sha256
        self.stat = None
        self.source = None
        self.error = None
        self.resumed = False


def hub_id(remote):
    return remote.sha256 if remote.lfs else remote.blob_id


def verify_local(path, remote):
    """(ok, sha256) for the bytes at ``path`` against what the Hub says about ``remote``."""
    try:
        if os.path.getsize(path) != remote.size:
            return False, None
        if remote.lfs and remote.sha256:
            digest = _hashing.sha256_file(path)
            return digest == remote.sha256, digest
        if _hashing.git_blob_sha1(path) != remote.blob_id:
            return False, None
        return True, _hashing.sha256_file(path)
    except OSError:
        return False, None


def link_candidates(link_from):
    """{hub id: [(path, record)]} from the manifests of earlier verified revisions."""
    found = {}
    for directory in link_from or []:
        try:
            manifest = _manifest.read_manifest(directory)
        except _manifest.ManifestError:
            continue
        if not manifest:
            continue
        for rel, record in manifest["files"].items():
            try:
                path = _paths.dest_path(directory, rel)
            except _paths.UnsafePathError:
                continue
            ids = {record.get("hub_id"), record.get("sha256")} - {None}
            for ident in ids:
                found.setdefault(ident, []).append((path, record))
    return found


def plan(items, manifest, link_from, workers=None):
    """Decide present / link / fetch for every item (hashing files whose stat record is stale)."""
    old = (manifest or {}).get("files", {}) if manifest else {}
    to_hash = []
    for item in items:
        record = old.get(item.remote.path)
        if (
            record
            and record.get("hub_id") == hub_id(item.remote)
            and record.get("size") == item.remote.size
            and _manifest.same_stat(record.get("stat"), item.final)
        ):
            item.action = "present"
            item.sha256 = record.get("sha256")
            item.stat = record.get("stat")
        elif os.path.lexists(item.final):
            to_hash.append(item)
        else:
            item.action = "fetch"
    # A file at its final path without a matching stat record: changed, corrupted, or never
    # recorded. Its bytes decide (a same-size corrupted file is not "present").
    if to_hash:
        with ThreadPoolExecutor(max_workers=workers or _hashing.default_workers()) as pool:
            results = list(pool.map(lambda it: verify_local(it.final, it.remote), to_hash))
        for item, (ok, digest) in zip(to_hash, results):
            if ok and os.path.isfile(item.final) and not os.path.islink(item.final):
                item.action = "present"
                item.sha256 = digest
                item.stat = _manifest.stat_record(item.final)
            else:
                item.action = "fetch"
                item.error = "differs from the Hub's copy"
    candidates = link_candidates(link_from) if link_from else {}
    for item in items:
        if item.action != "fetch":
            continue
        for path, record in candidates.get(hub_id(item.remote), []):
            if record.get("size") == item.remote.size and os.path.isfile(path):
                item.action = "link"
                item.source = (path, record)
                break
    return items


# ----------------------------------------------------------------------------- strays


def scan_strays(dest, wanted_paths, staging_keys):
    """Files in ``dest`` that are not part of the revision.

    kind ``partial``: a downloader's leftover (``*.incomplete`` of huggingface_hub, ``.aria2``
    control files, our own stale staging files); kind ``extra``: any other file not in the
    revision (never removed).
    """
    strays = []
    meta = os.path.join(dest, _manifest.META_DIR)
    staging = os.path.join(meta, STAGING)
    for root, dirs, names in os.walk(dest):
        if root == dest and _manifest.META_DIR in dirs:
            dirs.remove(_manifest.META_DIR)
        for name in names:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, dest)
            if rel in wanted_paths:
                continue
            kind = "partial" if name.endswith(PARTIAL_SUFFIXES) else "extra"
            strays.append({"path": rel, "kind": kind, "bytes": allocated_bytes(path)})
    if os.path.isdir(staging):
        for name in sorted(os.listdir(staging)):
            base = name[: -len(".aria2")] if name.endswith(".aria2") else name
            if base in staging_keys:
                continue
            path = os.path.join(staging, name)
            if os.path.isfile(path):
                strays.append(
                    {"path": os.path.relpath(path, dest), "kind": "partial", "bytes": allocated_bytes(path)}
                )
    strays.sort(key=lambda s: s["path"])
    return strays


def prune(dest, strays):
    pruned = []
    for stray in strays:
        if stray["kind"] != "partial":
            continue  # only what we classified as a partial; never anything else
        path = os.path.join(dest, stray["path"])
        try:
            if os.path.isfile(path) and not os.path.islink(path):
                os.unlink(path)
                pruned.append(stray["path"])
        except OSError:
            pass
    return pruned


# ----------------------------------------------------------------------------- progress


class Progress(object):
    """``<dest>/.gpufleet/progress.json``: bytes done, rate and ETA while aria2 runs."""

    def __init__(self, dest, repo_id, commit, items, check_mode=False):
        self.path = os.path.join(_manifest.meta_dir(dest), PROGRESS)
        self.repo_id = repo_id
        self.commit = commit
        self.items = items
        self.enabled = not check_mode
        self.started = time.time()
        self.total = sum(it.remote.size for it in items)
        self.base = None
        self.window = []
        self.staging = os.path.join(_manifest.meta_dir(dest), STAGING)

    def bytes_done(self):
        done = 0
        for item in self.items:
            if item.stat is not None:
                done += item.remote.size
            else:
                done += min(item.remote.size, allocated_bytes(os.path.join(self.staging, item.key)))
        return done

    def write(self, state="running", message=None):
        if not self.enabled:
            return None
        now = time.time()
        done = self.bytes_done()
        if self.base is None:
            self.base = done
        self.window.append((now, done))
        self.window = [w for w in self.window if now - w[0] <= 20.0] or [(now, done)]
        t0, d0 = self.window[0]
        rate = (done - d0) / (now - t0) if now - t0 >= 0.5 else 0.0
        left = max(0, self.total - done)
        eta = (left / rate) if rate > 0 else None
        files_done = sum(1 for it in self.items if it.stat is not None)
        line = message or "%s: %s / %s (%.0f%%), %s/s, ETA %s, %d/%d files" % (
            self.repo_id,
            human(done),
            human(self.total),
            100.0 * done / self.total if self.total else 100.0,
            human(rate),
            ("%ds" % eta) if eta is not None else "?",
            files_done,
            len(self.items),
        )
        data = {
            "format": 1,
            "state": state,
            "repo_id": self.repo_id,
            "commit": self.commit,
            "bytes_total": self.total,
            "bytes_done": done,
            "bytes_this_run": done - self.base,
            "rate_bytes_s": round(rate, 1),
            "eta_s": round(eta, 1) if eta is not None else None,
            "files_total": len(self.items),
            "files_done": files_done,
            "started_at": round(self.started, 3),
            "updated_at": round(now, 3),
            "elapsed_s": round(now - self.started, 1),
            "line": line,
        }
        try:
            _manifest.atomic_write_json(self.path, data)
        except OSError:
            pass
        return data


# ----------------------------------------------------------------------------- fetching


def _place(item, staged, dest):
    """Rename a verified staging file to its final path (re-checking the path right before)."""
    final = _paths.dest_path(dest, item.remote.path)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    if os.path.isdir(final) and not os.path.islink(final):
        raise SnapshotError("%s is a directory where the revision has a file; move it away" % final)
    os.chmod(staged, 0o644)
    os.replace(staged, final)
    item.final = final
    item.stat = _manifest.stat_record(final)


def _link(item, staging, dest):
    src, record = item.source
    if not _manifest.same_stat(record.get("stat"), src):
        ok, digest = verify_local(src, item.remote)
        if not ok:
            return False
        item.sha256 = digest
    else:
        item.sha256 = record.get("sha256") or item.remote.sha256
    tmp = os.path.join(staging, item.key + ".link")
    try:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.link(src, tmp)
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            return False  # another filesystem or no hard links here: fetch instead
        raise
    _place(item, tmp, dest)
    return True


def _hash_staged(path, remote):
    """(ok, sha256, stat record) of a staging file; the record is None if it changed while hashed."""
    try:
        before = _manifest.stat_record(path)
    except OSError:
        return False, None, None
    ok, digest = verify_local(path, remote)
    try:
        after = _manifest.stat_record(path)
    except OSError:
        after = None
    return ok, digest, (before if before == after else None)


def _settle_staged(item, staged, ctrl):
    """Decide about a staging file left by an earlier run before aria2 sees it.

    With --continue, aria2 takes a file without its .aria2 control file as complete up to its
    length (a preallocated file looks whole): such a file is hashed, kept only if it matches.
    Returns True when the file is whole and verified (ready to place).
    """
    if not os.path.exists(staged):
        if os.path.exists(ctrl):
            os.unlink(ctrl)
        return False
    if os.path.exists(ctrl):
        item.resumed = True
        return False
    ok, digest = verify_local(staged, item.remote)
    if ok:
        item.sha256 = digest
        item.resumed = True
        return True
    os.unlink(staged)
    return False


def fetch(items, dest, opts, token, use_token, progress, log):
    """Fetch every item whose action is fetch; returns {path: error} for the ones that failed."""
    staging = os.path.join(_manifest.meta_dir(dest), STAGING)
    os.makedirs(staging, mode=0o700, exist_ok=True)
    os.chmod(staging, 0o700)
    opener = _hub.url_opener(opts["proxy"], opts["validate_certs"], opts["ca_path"])
    endpoint = opts["endpoint"] or os.environ.get("HF_ENDPOINT") or _hub.DEFAULT_ENDPOINT
    # One fetch per content id; the other paths with the same bytes are linked from it after.
    by_key = {}
    for item in items:
        if item.action == "fetch":
            by_key.setdefault(item.key, []).append(item)
    pending = {key: group[0] for key, group in by_key.items()}
    errors = {}
    send_token = bool(token) and use_token
    deadline = None
    attempts = max(1, opts["max_tries"])
    for attempt in range(1, attempts + 1):
        # Before every round: what an earlier (possibly killed) aria2 left must not be taken on trust.
        for key, first in list(pending.items()):
            staged = os.path.join(staging, key)
            if _settle_staged(first, staged, staged + ".aria2"):
                _place(first, staged, dest)
                pending.pop(key)
                errors.pop(first.remote.path, None)
        if not pending:
            break
        wait_hint = 0.0

        # 1. resolve: the token goes to the endpoint only; aria2 gets the URL it was sent to.
        def resolve(item):
            try:
                return item, _hub.resolve_file(
                    opener, endpoint, opts["repo_id"], opts["commit"], item.remote.path,
                    token=token if send_token else None, repo_type=opts["repo_type"], timeout=opts["timeout"],
                ), None
            except _hub.HubHTTPError as exc:
                return item, None, exc
            except (OSError, ValueError) as exc:
                return item, None, exc

        mark = time.monotonic()
        with ThreadPoolExecutor(max_workers=8) as pool:
            resolved = list(pool.map(resolve, list(pending.values())))
            refused = [r[0] for r in resolved if getattr(r[2], "status", None) in (401, 403)]
            if refused and token and not send_token:
                # a gated or private repo: from now on the token goes along (to the endpoint only)
                send_token = True
                again = {r[0].key: r for r in pool.map(resolve, refused)}
                resolved = [again.get(r[0].key, r) for r in resolved]
        _took(opts, "resolve", mark)
        batch = []
        direct = []
        for item, url, exc in resolved:
            if exc is not None:
                status = getattr(exc, "status", None)
                if status in (401, 403):
                    raise SnapshotError(
                        "the Hub refused %s of %s (%s): %s"
                        % (
                            item.remote.path, opts["repo_id"], getattr(exc, "message", exc),
                            "the token has no access to this gated/private repo; request access or use another token"
                            if send_token else "gated or private repo: set token (or HF_TOKEN on the host)",
                        ),
                        status=status,
                    )
                if status == 404:
                    raise SnapshotError(
                        "%s is listed in %s@%s but the Hub answers 404 for it: %s"
                        % (item.remote.path, opts["repo_id"], opts["commit"], getattr(exc, "message", exc))
                    )
                errors[item.remote.path] = "resolve: %s" % (getattr(exc, "message", None) or exc)
                wait_hint = max(wait_hint, getattr(exc, "retry_after", None) or 0.0)
                continue
            if url.sha256 and item.remote.lfs and item.remote.sha256 and url.sha256 != item.remote.sha256:
                raise SnapshotError(
                    "the Hub's listing and its resolve answer disagree on %s's sha256 (%s vs %s)"
                    % (item.remote.path, item.remote.sha256, url.sha256)
                )
            if url.direct and send_token:
                direct.append((item, url))
            else:
                batch.append((item, url))
        # 2. bytes the endpoint serves itself to a token holder: in-process, the token never leaves us
        for item, url in direct:
            staged = os.path.join(staging, item.key)
            try:
                _hub.download_direct(opener, url.url, staged, token=token, timeout=opts["timeout"])
            except _hub.HubHTTPError as exc:
                errors[item.remote.path] = "GET: %s" % exc.message
                wait_hint = max(wait_hint, exc.retry_after or 0.0)
                continue
            except OSError as exc:
                errors[item.remote.path] = "GET: %s" % exc
                continue
            ok, digest = verify_local(staged, item.remote)
            if not ok:
                os.unlink(staged)
                errors[item.remote.path] = "downloaded bytes do not match the Hub's id"
                continue
            item.sha256 = digest
            _place(item, staged, dest)
            pending.pop(item.key, None)
            errors.pop(item.remote.path, None)
        # 3. everything else: one aria2c, no token, signed URLs only
        if batch:
            aria2_checks = bool(opts["aria2_checksum"])
            jobs = [
                _aria2.Aria2File(item.key, url.url, staging, item.key,
                                 item.remote.sha256 if aria2_checks and item.remote.lfs else None, item.remote.size)
                for item, url in batch
            ]
            # Our single hash pass over each file: started as soon as aria2 reports the file
            # complete (it has closed it and never writes it again), in parallel threads, while the
            # other files still download; only the last files' hashes are left for the end.
            in_batch = {item.key: item for item, url in batch}
            hashes = {}
            pool = ThreadPoolExecutor(max_workers=opts["hash_workers"] or _hashing.default_workers())

            def hash_later(key):
                item = in_batch.get(key)
                if item is None or key in hashes or (aria2_checks and item.remote.lfs and item.remote.sha256):
                    return
                hashes[key] = pool.submit(_hash_staged, os.path.join(staging, key), item.remote)

            mark = time.monotonic()
            try:
                result = _aria2.run(
                    jobs, os.path.join(staging, "run"), aria2c=opts["aria2c_path"], tick=progress.write,
                    tick_interval=min(2.0, opts["progress_interval"]), deadline=deadline, proxy=opts["proxy"],
                    on_complete=hash_later,
                    connections=opts["connections"], splits=opts["splits"], parallel_files=opts["parallel_files"],
                    min_split_size=opts["min_split_size"], timeout=opts["timeout"], retry_wait=opts["retry_wait"],
                    validate_certs=opts["validate_certs"], ca_path=opts["ca_path"],
                )
                mark = _took(opts, "aria2", mark)
                for item, url in batch:
                    if result.outcomes[item.key].status == "OK":
                        hash_later(item.key)
                hashed = {key: future.result() for key, future in hashes.items()}
            finally:
                pool.shutdown(wait=True)
            mark = _took(opts, "hash_after_aria2", mark)
            if result.retry_after:
                wait_hint = max(wait_hint, float(result.retry_after))
            for item, url in batch:
                outcome = result.outcomes[item.key]
                staged = os.path.join(staging, item.key)
                ctrl = staged + ".aria2"
                whole = outcome.status == "OK" and os.path.isfile(staged) and not os.path.exists(ctrl)
                if whole and os.path.getsize(staged) == item.remote.size:
                    if aria2_checks and item.remote.lfs and item.remote.sha256:
                        # aria2 hashed it against checksum=sha-256 before reporting OK
                        ok, digest = True, item.remote.sha256
                    else:
                        ok, digest, record = hashed.get(item.key) or (False, None, None)
                        if not _manifest.same_stat(record, staged):
                            # touched since (or while) it was hashed: only its bytes now decide
                            ok, digest = verify_local(staged, item.remote)
                    if ok:
                        item.sha256 = digest
                        _place(item, staged, dest)
                        pending.pop(item.key, None)
                        errors.pop(item.remote.path, None)
                        continue
                    errors[item.remote.path] = "downloaded bytes do not match the Hub's id"
                    _remove(staged, ctrl)
                    continue
                if whole:
                    errors[item.remote.path] = "size %d, expected %d" % (os.path.getsize(staged), item.remote.size)
                    _remove(staged, ctrl)
                    continue
                code = outcome.code
                message = outcome.message or _aria2.explain(code)
                if code in (32, 8, 10):
                    # checksum failed / server cannot resume / control file unusable: start over
                    _remove(staged, ctrl)
                if code == 9:
                    raise SnapshotError(
                        "the disk under %s is full (aria2: %s) while fetching %s; free space or raise the volume"
                        % (dest, message, item.remote.path)
                    )
                errors[item.remote.path] = "aria2 exit %s: %s" % (code, message) if code is not None else message
                if outcome.http_status in (403, 410):
                    errors[item.remote.path] += " (signed URL expired or refused: re-resolving)"
        if not pending:
            break
        if attempt < attempts:
            wait = min(MAX_RETRY_AFTER, max(wait_hint, min(MAX_BACKOFF, opts["retry_wait"] * 2 ** (attempt - 1))))
            log("%d file(s) not done after try %d/%d, next try in %.0f s" % (len(pending), attempt, attempts, wait))
            progress.write(message="retrying %d file(s) in %.0f s: %s" % (
                len(pending), wait, "; ".join("%s: %s" % kv for kv in sorted(errors.items())[:3])))
            time.sleep(wait)
    failed = {item.remote.path: errors.get(item.remote.path, "not fetched") for item in pending.values()}
    # Same bytes under several paths: the first was fetched, the others are hard links to it.
    for key, group in by_key.items():
        first = group[0]
        for other in group[1:]:
            if first.stat is None:
                failed[other.remote.path] = failed.get(first.remote.path, "not fetched")
                continue
            other.source = (first.final, {"stat": first.stat, "sha256": first.sha256})
            tmp = os.path.join(staging, other.key + ".link")
            if os.path.lexists(tmp):
                os.unlink(tmp)
            try:
                os.link(first.final, tmp)
            except OSError:
                shutil.copyfile(first.final, tmp)
            other.sha256 = first.sha256
            _place(other, tmp, dest)
    return failed


def _took(opts, phase, since):
    """Add the seconds since ``since`` to ``phase`` in the result's timings; returns now."""
    now = time.monotonic()
    timings = opts.setdefault("timings", {})
    timings[phase] = timings.get(phase, 0.0) + now - since
    return now


def _remove(*paths):
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


# ----------------------------------------------------------------------------- entry point


def _normalise(params):
    opts = dict(DEFAULTS)
    opts.update({k: v for k, v in params.items() if v is not None or k not in DEFAULTS})
    for key, value in DEFAULTS.items():
        if opts.get(key) is None:
            opts[key] = value
    if not opts.get("repo_id") or "/" not in opts["repo_id"] and not re.match(r"^[\w.-]+$", opts["repo_id"]):
        raise SnapshotError("repo_id %r is not a Hub repo id (like org/name)" % opts.get("repo_id"))
    if not opts.get("dest") or not os.path.isabs(opts["dest"]):
        raise SnapshotError("dest must be an absolute path, got %r" % opts.get("dest"))
    opts["dest"] = os.path.normpath(opts["dest"])
    if opts["repo_type"] not in ("model", "dataset", "space"):
        raise SnapshotError("repo_type must be model, dataset or space")
    if not 1 <= int(opts["connections"]) <= 16:
        raise SnapshotError("connections must be 1-16 (aria2's per-server limit), got %s" % opts["connections"])
    for key in ("splits", "parallel_files", "max_tries"):
        if int(opts[key]) < 1:
            raise SnapshotError("%s must be at least 1, got %s" % (key, opts[key]))
    if not re.match(r"^\d+[KM]?$", str(opts["min_split_size"])):
        raise SnapshotError("min_split_size must look like 1M or 20M (aria2 syntax), got %r" % opts["min_split_size"])
    if opts["endpoint"]:
        opts["endpoint"] = opts["endpoint"].rstrip("/")
    opts["endpoint_display"] = opts["endpoint"] or os.environ.get("HF_ENDPOINT") or _hub.DEFAULT_ENDPOINT
    link_from = opts.get("link_from") or []
    if isinstance(link_from, str):
        link_from = [link_from]
    opts["link_from"] = [os.path.normpath(p) for p in link_from if p and os.path.normpath(p) != opts["dest"]]
    return opts


def find_aria2c(path=None):
    if path:
        return path if os.access(path, os.X_OK) else None
    return shutil.which("aria2c")


def _host_token(given):
    if given:
        return given
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    return get_token() or None


def _offline_present(opts):
    """A pinned commit with a matching manifest and untouched files: no network at all."""
    if not COMMIT_RE.match(opts["revision"]):
        return None
    try:
        manifest = _manifest.read_manifest(opts["dest"])
    except _manifest.ManifestError:
        return None
    if not manifest or manifest.get("commit") != opts["revision"] or not manifest.get("complete", True):
        return None
    if (manifest.get("repo_id"), manifest.get("repo_type")) != (opts["repo_id"], opts["repo_type"]):
        return None
    if (manifest.get("allow_patterns"), manifest.get("ignore_patterns")) != (opts["allow_patterns"], opts["ignore_patterns"]):
        return None
    for rel, record in manifest["files"].items():
        try:
            path = _paths.dest_path(opts["dest"], rel)
        except _paths.UnsafePathError:
            return None
        if not _manifest.same_stat(record.get("stat"), path):
            return None
    return manifest


def snapshot(params, check_mode=False, log=None):
    """Run hf_snapshot; returns the result dict (changed, commit, files, ...). Raises SnapshotError.

    Whatever token is in use (given or the host's), it never appears in an error message.
    """
    token = _host_token(params.get("token"))
    try:
        return _snapshot(params, token, check_mode, log)
    except SnapshotError as exc:
        if token and token in exc.msg:
            exc.msg = exc.msg.replace(token, "********")
            exc.args = (exc.msg,)
        raise


def _snapshot(params, token, check_mode, log):
    log = log or (lambda msg: None)
    started = time.monotonic()
    opts = _normalise(params)
    dest = opts["dest"]
    opts["aria2c_path"] = find_aria2c(opts.get("aria2c"))

    manifest = _offline_present(opts)
    if manifest is not None:
        items = []
        for rel, record in sorted(manifest["files"].items()):
            items.append({"path": rel, "size": record["size"], "action": "present"})
        strays = scan_strays(dest, set(manifest["files"]), set())
        pruned = []
        if opts["prune_partials"] and not check_mode and any(s["kind"] == "partial" for s in strays):
            with _manifest.DirLock(dest, timeout=opts["lock_timeout"]):
                pruned = prune(dest, strays)
        return _result(opts, manifest["commit"], items, 0, started, strays, pruned, changed=bool(pruned),
                       offline=True, check_mode=check_mode)

    mark = time.monotonic()
    commit, remote_files, use_token = list_remote(opts, token, log)
    _took(opts, "list", mark)
    opts["commit"] = commit
    selected = [f for f in remote_files if matches_patterns(f.path, opts["allow_patterns"], opts["ignore_patterns"])]
    unsafe = []
    items = []
    for remote in selected:
        try:
            if remote.path.split("/")[0] == _manifest.META_DIR:
                raise _paths.UnsafePathError("%r is inside %s/, which hf_snapshot keeps for itself" % (remote.path, _manifest.META_DIR))
            items.append(Item(remote, _paths.dest_path(dest, remote.path)))
        except _paths.UnsafePathError as exc:
            unsafe.append(str(exc))
    if unsafe:
        raise SnapshotError(
            "refusing %s@%s: %d remote path(s) would land outside %s: %s"
            % (opts["repo_id"], commit, len(unsafe), dest, "; ".join(unsafe[:10])),
            unsafe=unsafe,
        )
    if not items:
        raise SnapshotError(
            "%s@%s has no file matching allow_patterns=%s ignore_patterns=%s"
            % (opts["repo_id"], commit, opts["allow_patterns"], opts["ignore_patterns"])
        )
    if check_mode:
        return _run(opts, items, token, use_token, started, check_mode=True, log=log)
    os.makedirs(dest, exist_ok=True)
    try:
        with _manifest.DirLock(dest, timeout=opts["lock_timeout"]):
            return _run(opts, items, token, use_token, started, check_mode=False, log=log)
    except _manifest.LockTimeout as exc:
        raise SnapshotError(str(exc))


def _run(opts, items, token, use_token, started, check_mode, log):
    dest = opts["dest"]
    try:
        manifest = _manifest.read_manifest(dest) if os.path.isdir(dest) else None
    except _manifest.ManifestError as exc:
        log("ignoring unreadable manifest: %s" % exc)
        manifest = None
    if manifest and (manifest.get("repo_id"), manifest.get("repo_type")) != (opts["repo_id"], opts["repo_type"]):
        raise SnapshotError(
            "%s holds %s (manifest), not %s: use another dest" % (dest, manifest.get("repo_id"), opts["repo_id"])
        )
    mark = time.monotonic()
    plan(items, manifest, opts["link_from"], workers=opts["hash_workers"])
    _took(opts, "plan", mark)
    staging = os.path.join(_manifest.meta_dir(dest), STAGING)
    to_fetch = {}
    for item in items:
        if item.action == "fetch":
            to_fetch.setdefault(item.key, item)
    have = sum(allocated_bytes(os.path.join(staging, key)) for key in to_fetch)
    bytes_to_fetch = sum(item.remote.size for item in to_fetch.values())
    needed = max(0, bytes_to_fetch - have)
    free, probe = free_bytes(dest)
    disk = {"needed_bytes": needed, "free_bytes": free, "min_free_bytes": opts["min_free_bytes"], "filesystem": probe}
    if to_fetch and free < needed + opts["min_free_bytes"]:
        raise SnapshotError(
            "not enough disk space for %s@%s in %s: %d file(s) need %s (%d bytes) plus the %s headroom "
            "(min_free_bytes), but the filesystem of %s has %s (%d bytes) free; free space, use a bigger "
            "volume or lower min_free_bytes" % (
                opts["repo_id"], opts["commit"][:12], dest, len(to_fetch), human(needed), needed,
                human(opts["min_free_bytes"]), probe, human(free), free,
            ),
            disk=disk,
        )
    if to_fetch and not opts["aria2c_path"]:
        raise SnapshotError(
            "aria2c not found%s: install the aria2 package or set the aria2c option"
            % (" at %s" % opts["aria2c"] if opts.get("aria2c") else " on PATH")
        )
    wanted = {item.remote.path for item in items}
    if check_mode:
        strays = scan_strays(dest, wanted, set(to_fetch)) if os.path.isdir(dest) else []
        rows = [{"path": it.remote.path, "size": it.remote.size, "action": it.action} for it in items]
        changed = any(it.action != "present" for it in items) or (
            opts["prune_partials"] and any(s["kind"] == "partial" for s in strays))
        res = _result(opts, opts["commit"], rows, 0, started, strays, [], changed=changed, check_mode=True)
        res["bytes_to_fetch"] = needed
        res["disk"] = disk
        return res

    progress = Progress(dest, opts["repo_id"], opts["commit"], list(to_fetch.values()))
    linked = 0
    for item in items:
        if item.action == "link":
            os.makedirs(staging, mode=0o700, exist_ok=True)
            if _link(item, staging, dest):
                linked += 1
            else:
                item.action = "fetch"
                to_fetch.setdefault(item.key, item)
    progress.items = list({it.key: it for it in items if it.action == "fetch"}.values())
    progress.total = sum(it.remote.size for it in progress.items)
    bytes_before = progress.bytes_done() if progress.items else 0
    progress.write()
    failed = {}
    if any(it.action == "fetch" for it in items):
        failed = fetch(items, dest, opts, token, use_token, progress, log)
    fetched_bytes = sum(it.remote.size for it in progress.items if it.stat is not None) - bytes_before
    fetched_bytes = max(0, fetched_bytes)

    strays = scan_strays(dest, wanted, set() if not failed else {it.key for it in items if it.action == "fetch"})
    pruned = prune(dest, strays) if opts["prune_partials"] else []
    if pruned:
        strays = [s for s in strays if s["path"] not in pruned]
    files = {}
    for item in items:
        files[item.remote.path] = {
            "size": item.remote.size,
            "sha256": item.sha256,
            "hub_id": hub_id(item.remote),
            "lfs": item.remote.lfs,
            "stat": item.stat,
        }
    new = _manifest.new_manifest(opts["repo_id"], opts["repo_type"], opts["revision"], opts["commit"],
                                 opts["endpoint_display"], files)
    new["allow_patterns"] = opts["allow_patterns"]
    new["ignore_patterns"] = opts["ignore_patterns"]
    new["complete"] = not failed
    old = None
    try:
        old = _manifest.read_manifest(dest)
    except _manifest.ManifestError:
        pass
    keys = ("repo_id", "repo_type", "revision", "commit", "endpoint", "files", "allow_patterns", "ignore_patterns", "complete")
    manifest_changed = old is None or any(old.get(k) != new.get(k) for k in keys)
    if manifest_changed:
        mark = time.monotonic()
        _manifest.write_manifest(dest, new)
        _took(opts, "manifest", mark)
    staging_dir = os.path.join(_manifest.meta_dir(dest), STAGING)
    if not failed and os.path.isdir(staging_dir):
        shutil.rmtree(os.path.join(staging_dir, "run"), ignore_errors=True)
        try:
            os.rmdir(staging_dir)
        except OSError:
            pass
    rows = []
    for item in items:
        if item.remote.path in failed:
            action = "failed"
        elif item.action == "present":
            action = "present"
        elif item.action == "link":
            action = "linked"
        else:
            action = "resumed" if item.resumed else "fetched"
        rows.append({"path": item.remote.path, "size": item.remote.size, "action": action})
    # A refreshed stat record (a file touched but still matching) is bookkeeping, not a change.
    changed = any(r["action"] in ("fetched", "resumed", "linked") for r in rows) or bool(pruned) or (
        old is None or any(old.get(k) != new.get(k) for k in keys if k != "files"))
    res = _result(opts, opts["commit"], rows, fetched_bytes, started, strays, pruned, changed=changed)
    res["disk"] = disk
    if failed:
        progress.write(state="failed", message="failed: %d file(s)" % len(failed))
        raise SnapshotError(
            "%d file(s) of %s@%s could not be fetched after %d tries: %s"
            % (len(failed), opts["repo_id"], opts["commit"][:12], opts["max_tries"],
               "; ".join("%s: %s" % kv for kv in sorted(failed.items()))),
            failed=failed,
            result=res,
        )
    if progress.items:
        progress.write(state="done", message="%s@%s: done, %s fetched in %.0f s" % (
            opts["repo_id"], opts["commit"][:12], human(fetched_bytes), res["duration"]))
    return res


def _result(opts, commit, rows, fetched_bytes, started, strays, pruned, changed, offline=False, check_mode=False):
    duration = time.monotonic() - started
    return {
        "changed": bool(changed),
        "repo_id": opts["repo_id"],
        "revision": opts["revision"],
        "commit": commit,
        "dest": opts["dest"],
        "files": rows,
        "bytes_fetched": fetched_bytes,
        "bytes_total": sum(r["size"] for r in rows),
        "duration": round(duration, 3),
        "throughput_mib_s": round(fetched_bytes / duration / 2**20, 1) if duration > 0 and fetched_bytes else 0.0,
        "stray": strays,
        "pruned": pruned,
        "manifest": os.path.join(_manifest.meta_dir(opts["dest"]), _manifest.MANIFEST),
        "offline": offline,
        "check_mode": check_mode,
        "timings": {k: round(v, 3) for k, v in sorted(opts.get("timings", {}).items())},
    }
