"""Read-only model of the lab fixture store, as the Hub server needs it.

Layout (written by tests/lab/fixtures.py):
    store/<org>/<name>/repo.json   refs, commits and per-commit file lists
    blobs/<sha256>                 file content, content-addressed
    git/<org>/<name>/              a real git repo with the same commits (optional here)

Everything the Hub reports about a repo (commit shas, blob ids, folder tree ids, sizes, LFS
metadata) is derived from repo.json, so the server never needs the git repo except as a last
resort to find the bytes of a small non-LFS file whose sha256 repo.json does not give.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import threading
from dataclasses import dataclass, field

SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")

# Regular files only: the fixtures never mark anything executable and git trees need a mode.
_FILE_MODE = b"100644"
_TREE_MODE = b"40000"


@dataclass
class FileEntry:
    path: str
    size: int
    blob_id: str
    lfs: dict | None  # {"sha256", "size", "pointer_size"}
    sha256: str | None = None  # content sha256 when known (always for LFS files)


@dataclass
class Commit:
    sha: str
    parents: list
    date: str
    title: str
    files: dict  # path -> FileEntry
    dirs: dict = field(default_factory=dict)  # dir path -> tree id (git sha1); "" is the root

    def children(self, prefix: str):
        """Immediate children of directory `prefix` ("" for the root): (files, dirs)."""
        base = prefix + "/" if prefix else ""
        files, dirs = [], []
        for p in self.files:
            if p.startswith(base):
                rest = p[len(base):]
                if "/" in rest:
                    continue
                files.append(p)
        for d in self.dirs:
            if d and d.startswith(base) and "/" not in d[len(base):]:
                dirs.append(d)
        return sorted(files), sorted(dirs)


class RepoNotFound(Exception):
    pass


class RevisionNotFound(Exception):
    pass


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _git_tree_id(entries: list) -> str:
    """Git tree object id from [(name, is_dir, sha1hex)], sorted the way git sorts trees."""
    # git compares directory names as if they ended with "/".
    ordered = sorted(entries, key=lambda e: e[0].encode() + (b"/" if e[1] else b""))
    body = b"".join(
        (_TREE_MODE if is_dir else _FILE_MODE) + b" " + name.encode() + b"\0" + bytes.fromhex(sha)
        for name, is_dir, sha in ordered
    )
    return hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()


def _compute_tree_ids(files: dict) -> dict:
    """Tree ids of every directory, as a Hub git repo holding LFS pointers would report them."""
    dirs: dict = {"": []}
    for path in files:
        parts = path.split("/")
        for i in range(1, len(parts)):
            dirs.setdefault("/".join(parts[:i]), [])
    ids: dict = {}
    # Deepest first so each parent finds its subtrees' ids.
    for d in sorted(dirs, key=lambda x: -x.count("/") if x else 1):
        base = d + "/" if d else ""
        entries = []
        for p, f in files.items():
            if p.startswith(base) and "/" not in p[len(base):]:
                entries.append((p[len(base):], False, f.blob_id))
        for sub in dirs:
            if sub and sub.startswith(base) and "/" not in sub[len(base):] and sub != d:
                entries.append((sub[len(base):], True, ids[sub]))
        ids[d] = _git_tree_id(entries)
    return ids


class Repo:
    def __init__(self, repo_id: str, data: dict, mtime: float):
        self.repo_id = repo_id
        self.mtime = mtime
        self.gated = bool(data.get("gated", False))
        self.private = bool(data.get("private", False))
        refs = data.get("refs") or {}
        self.branches = dict(refs.get("branches") or {})
        self.tags = dict(refs.get("tags") or {})
        self.commits: dict = {}
        for sha, c in (data.get("commits") or {}).items():
            files = {}
            for f in c.get("files", []):
                lfs = f.get("lfs")
                files[f["path"]] = FileEntry(
                    path=f["path"],
                    size=int(f["size"]),
                    blob_id=f["blob_id"],
                    lfs=lfs,
                    sha256=(lfs or {}).get("sha256") or f.get("sha256"),
                )
            commit = Commit(sha=sha, parents=list(c.get("parents") or []), date=c.get("date") or "",
                            title=c.get("title") or "", files=files)
            commit.dirs = _compute_tree_ids(files)
            self.commits[sha] = commit
        self._last_commit_cache: dict = {}

    @property
    def default_branch(self) -> str:
        return "main" if "main" in self.branches else next(iter(self.branches), "main")

    def resolve(self, rev: str | None) -> Commit:
        """Branch, tag, full commit sha, or refs/heads/X / refs/tags/X."""
        rev = rev or self.default_branch
        sha = None
        if rev.startswith("refs/heads/"):
            sha = self.branches.get(rev[len("refs/heads/"):])
        elif rev.startswith("refs/tags/"):
            sha = self.tags.get(rev[len("refs/tags/"):])
        elif rev in self.branches:
            sha = self.branches[rev]
        elif rev in self.tags:
            sha = self.tags[rev]
        elif SHA1_RE.match(rev) and rev in self.commits:
            sha = rev
        if sha is None or sha not in self.commits:
            raise RevisionNotFound(rev)
        return self.commits[sha]

    def last_commit(self, commit: Commit, path: str, is_dir: bool) -> Commit:
        """Newest first-parent ancestor from which `path` is unchanged (what the Hub's expand shows)."""
        key = (commit.sha, path, is_dir)
        if key in self._last_commit_cache:
            return self._last_commit_cache[key]

        def ident(c):
            if is_dir:
                return c.dirs.get(path)
            f = c.files.get(path)
            return f.blob_id if f else None

        want = ident(commit)
        cur = commit
        for dummy in range(10000):  # bounded walk; fixture histories are short
            if not cur.parents or cur.parents[0] not in self.commits:
                break
            parent = self.commits[cur.parents[0]]
            if ident(parent) != want:
                break
            cur = parent
        self._last_commit_cache[key] = cur
        return cur

    def head_commit(self) -> Commit | None:
        sha = self.branches.get(self.default_branch)
        return self.commits.get(sha) if sha else None


class FixtureStore:
    """Repos are loaded lazily and reloaded when their repo.json changes on disk."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.store_dir = os.path.join(self.root, "store")
        self.blobs_dir = os.path.join(self.root, "blobs")
        self.git_dir = os.path.join(self.root, "git")
        self._repos: dict = {}
        self._lock = threading.Lock()
        self._sha256_by_blob_id: dict = {}
        self._git_cache: dict = {}  # blob_id -> bytes, for non-LFS files only reachable via git

    def repo_ids(self) -> list:
        out = []
        if not os.path.isdir(self.store_dir):
            return out
        for org in sorted(os.listdir(self.store_dir)):
            d = os.path.join(self.store_dir, org)
            if not os.path.isdir(d):
                continue
            for name in sorted(os.listdir(d)):
                if os.path.isfile(os.path.join(d, name, "repo.json")):
                    out.append(f"{org}/{name}")
        return out

    def get(self, repo_id: str) -> Repo:
        parts = repo_id.split("/")
        if len(parts) != 2 or any(p in ("", ".", "..") for p in parts):
            raise RepoNotFound(repo_id)
        path = os.path.join(self.store_dir, parts[0], parts[1], "repo.json")
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            raise RepoNotFound(repo_id) from None
        with self._lock:
            repo = self._repos.get(repo_id)
            if repo is not None and repo.mtime == mtime:
                return repo
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        repo = Repo(repo_id, data, mtime)
        with self._lock:
            self._repos[repo_id] = repo
        return repo

    # -- content ------------------------------------------------------------------------------

    def blob_path(self, sha256: str) -> str | None:
        if not SHA256_RE.match(sha256 or ""):
            return None
        p = os.path.join(self.blobs_dir, sha256)
        return p if os.path.isfile(p) else None

    def open_content(self, repo: Repo, entry: FileEntry):
        """(fd, size) or (bytes, size) of a file's content, or None if the store lacks it."""
        sha = entry.sha256 or self._sha256_by_blob_id.get(entry.blob_id)
        if sha is None:
            sha = self._find_blob_by_git_sha1(entry)
        if sha is not None:
            p = self.blob_path(sha)
            if p is not None:
                return os.open(p, os.O_RDONLY), os.path.getsize(p)
        data = self._from_git(repo, entry)
        if data is not None:
            return data, len(data)
        return None

    def _find_blob_by_git_sha1(self, entry: FileEntry) -> str | None:
        """Non-LFS files are only named by git blob id: find the blob of that size and id."""
        if entry.lfs or entry.size > 64 * 1024 * 1024 or not os.path.isdir(self.blobs_dir):
            return None
        for name in os.listdir(self.blobs_dir):
            p = os.path.join(self.blobs_dir, name)
            try:
                if os.path.getsize(p) != entry.size:
                    continue
                with open(p, "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            bid = git_blob_sha1(data)
            self._sha256_by_blob_id[bid] = name
            if bid == entry.blob_id:
                return name
        return None

    def _from_git(self, repo: Repo, entry: FileEntry) -> bytes | None:
        if entry.lfs:
            return None
        if entry.blob_id in self._git_cache:
            return self._git_cache[entry.blob_id]
        gdir = os.path.join(self.git_dir, repo.repo_id)
        if not os.path.isdir(gdir):
            return None
        try:
            out = subprocess.run(["git", "-C", gdir, "cat-file", "blob", entry.blob_id],
                                 capture_output=True, timeout=30, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        if git_blob_sha1(out) != entry.blob_id:
            return None
        self._git_cache[entry.blob_id] = out
        return out
