"""The lab Hub is faithful enough for the real clients: huggingface_hub 2.4.0 and aria2c.

Every test drives a real client against the lab Hub (loopback) and checks the result against the
fixture git repos and blobs, which are the ground truth the Hub serves from.
"""

from __future__ import annotations

import hashlib
import http.client
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

TARGET = "gpufleet-lab/Kimi-K2.6-mini"
GATED = "gpufleet-lab/Kimi-K2.6-mini-gated"
DRAFTER = "gpufleet-lab/Kimi-K2.6-mini-DFlash"
GIT_TIMEOUT = 30


def _git(git_dir: Path, *args: str) -> bytes:
    # Read-only git plumbing on the fixture repos (the ground truth).
    return subprocess.run(["git", "-C", str(git_dir), *args], capture_output=True, check=True,
                          timeout=GIT_TIMEOUT).stdout


def _git_files(git_dir: Path, sha: str) -> dict:
    """path -> (git blob id, size) at commit `sha`."""
    out = {}
    for line in _git(git_dir, "ls-tree", "-r", "-l", "-z", sha).split(b"\0"):
        if not line:
            continue
        meta, path = line.split(b"\t", 1)
        _mode, _type, blob, size = meta.split()
        out[path.decode()] = (blob.decode(), int(size))
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _refs(hub, repo_id):
    d = hub.repo(repo_id)
    return d["refs"]["branches"]["main"], d["refs"]["tags"]["v1.0"], d


def _largest_lfs(hub, repo_id):
    main, unused_v1, d = _refs(hub, repo_id)
    return max((f for f in d["commits"][main]["files"] if f["lfs"]), key=lambda f: f["size"])


def test_snapshot_download_is_byte_identical_to_git(hub, tmp_path):
    main = _refs(hub, TARGET)[0]
    git_dir = hub.store / "git" / TARGET
    path = Path(snapshot_download(TARGET, endpoint=hub.api, cache_dir=tmp_path / "cache"))
    assert path.name == main, "snapshot folder must be named after the commit the Hub resolved"
    expected = _git_files(git_dir, main)
    got = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    assert got == sorted(expected)
    for rel in expected:
        assert (path / rel).read_bytes() == _git(git_dir, "show", f"{main}:{rel}"), rel
    # LFS files came through the CDN, without the API's Authorization, as ranged-capable bodies.
    cdn = [e for e in hub.log(server="cdn") if e["method"] == "GET"]
    n_lfs = sum(1 for p in expected if p.endswith(".safetensors"))
    assert len(cdn) == n_lfs and all(e["status"] == 200 for e in cdn)


def test_hf_hub_download_by_branch_tag_and_sha(hub, tmp_path):
    main, v1 = _refs(hub, TARGET)[:2]
    git_dir = hub.store / "git" / TARGET
    contents = {}
    for rev in ("main", "v1.0", v1, main, "refs/tags/v1.0"):
        p = Path(hf_hub_download(TARGET, "config.json", revision=rev, endpoint=hub.api, cache_dir=tmp_path))
        sha = main if rev in ("main", main) else v1
        assert p.parent.name == sha, f"{rev} resolved to {p.parent.name}"
        assert p.read_bytes() == _git(git_dir, "show", f"{sha}:config.json")
        contents[rev] = p.read_bytes()
    assert contents["main"] != contents["v1.0"], "fixture changes config.json on main"
    shard = _largest_lfs(hub, TARGET)
    p = Path(hf_hub_download(TARGET, shard["path"], endpoint=hub.api, cache_dir=tmp_path))
    assert _sha256(p) == shard["lfs"]["sha256"] and p.stat().st_size == shard["size"]


def test_model_info_files_metadata_matches_git(hub):
    main = _refs(hub, TARGET)[0]
    git_dir = hub.store / "git" / TARGET
    info = HfApi(endpoint=hub.api).model_info(TARGET, files_metadata=True)
    assert info.id == TARGET and info.sha == main and info.gated is False and info.private is False
    assert info.last_modified is not None
    git = _git_files(git_dir, main)
    assert sorted(s.rfilename for s in info.siblings) == sorted(git)
    for s in info.siblings:
        blob_id, size = git[s.rfilename]
        assert s.size == size, s.rfilename
        if s.rfilename.endswith(".safetensors"):
            content = _git(git_dir, "show", f"{main}:{s.rfilename}")
            assert s.lfs is not None and s.lfs.size == size
            assert s.lfs.sha256 == hashlib.sha256(content).hexdigest()
            pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{s.lfs.sha256}\n"
                       f"size {size}\n").encode()
            assert s.lfs.pointer_size == len(pointer)
            assert s.blob_id == hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()
        else:
            assert s.lfs is None and s.blob_id == blob_id
    gated = HfApi(endpoint=hub.api).model_info(GATED)  # metadata of a gated repo is public
    assert gated.gated == "manual"


def test_list_repo_tree_pages_through_everything(hub):
    main, v1, d = _refs(hub, TARGET)
    hub.config(tree_page_size=4, tree_page_size_expand=3)
    api = HfApi(endpoint=hub.api)
    entries = list(api.list_repo_tree(TARGET, recursive=True))
    files = d["commits"][main]["files"]
    assert sorted(e.path for e in entries) == sorted(f["path"] for f in files)
    by_path = {f["path"]: f for f in files}
    for e in entries:
        f = by_path[e.path]
        assert e.size == f["size"] and e.blob_id == f["blob_id"]
        assert (e.lfs.sha256 if e.lfs else None) == (f["lfs"]["sha256"] if f["lfs"] else None)
    tree_calls = [e for e in hub.log() if "/tree/" in e["path"]]
    assert len(tree_calls) == -(-len(files) // 4), "one request per page of 4"
    assert all("cursor=" in e["query"] for e in tree_calls[1:])
    # The Hub's form: an absolute URL on the API's own origin, the query kept, an opaque cursor.
    with urllib.request.urlopen(hub.api + "/api/models/%s/tree/main?recursive=true" % TARGET, timeout=10) as resp:
        link = resp.headers["Link"]
    assert link.startswith("<%s/api/models/%s/tree/main?recursive=true&cursor=" % (hub.api, TARGET))
    assert link.endswith('>; rel="next"')

    # expand=true: smaller pages, and the last commit that touched each file.
    expanded = {e.path: e for e in api.list_repo_tree(TARGET, recursive=True, expand=True)}
    assert expanded["config.json"].last_commit.oid == main
    assert expanded["model-00001-of-000004.safetensors"].last_commit.oid == v1
    assert expanded["config.json"].security.safe


def test_get_paths_info(hub):
    main, v1, d = _refs(hub, TARGET)
    shard = "model-00001-of-000004.safetensors"
    api = HfApi(endpoint=hub.api)
    got = api.get_paths_info(TARGET, ["config.json", shard, "does/not/exist"], revision="v1.0")
    assert [g.path for g in got] == ["config.json", shard]
    want = {f["path"]: f for f in d["commits"][v1]["files"]}
    assert got[0].blob_id == want["config.json"]["blob_id"] and got[0].lfs is None
    assert got[1].lfs.sha256 == want[shard]["lfs"]["sha256"]
    got = api.get_paths_info(TARGET, "config.json", expand=True)
    assert got[0].last_commit.oid == main


def test_refs_and_commits(hub):
    main, v1 = _refs(hub, TARGET)[:2]
    api = HfApi(endpoint=hub.api)
    refs = api.list_repo_refs(TARGET)
    assert [(b.name, b.target_commit) for b in refs.branches] == [("main", main)]
    assert [(t.name, t.target_commit) for t in refs.tags] == [("v1.0", v1)]
    assert [c.commit_id for c in api.list_repo_commits(TARGET)] == [main, v1]
    assert api.model_info(TARGET, revision="refs/tags/v1.0").sha == v1
    assert api.model_info(TARGET, revision=v1).sha == v1


def test_missing_repo_revision_and_file_raise_the_right_errors(hub, tmp_path):
    api = HfApi(endpoint=hub.api)
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("gpufleet-lab/no-such-repo")
    with pytest.raises(RevisionNotFoundError):
        api.model_info(TARGET, revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(TARGET, "config.json", revision="0" * 40, endpoint=hub.api, cache_dir=tmp_path)
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(TARGET, "no-such-file.json", endpoint=hub.api, cache_dir=tmp_path)
    statuses = sorted(e["status"] for e in hub.log())
    assert statuses == [404, 404, 404, 404]


def test_verify_repo_checksums(hub, tmp_path):
    local = tmp_path / "model"
    snapshot_download(DRAFTER, endpoint=hub.api, local_dir=local)
    api = HfApi(endpoint=hub.api)
    ok = api.verify_repo_checksums(DRAFTER, local_dir=local)
    main = hub.repo(DRAFTER)["refs"]["branches"]["main"]
    assert ok.checked_count == len(hub.repo(DRAFTER)["commits"][main]["files"])
    assert not ok.mismatches and not ok.missing_paths and not ok.extra_paths
    # A flipped byte in a weight file is caught against the Hub's lfs.sha256.
    shard = next(local.glob("*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    bad = api.verify_repo_checksums(DRAFTER, local_dir=local)
    assert [m["path"] for m in bad.mismatches] == [shard.name]


def test_gated_repo_needs_a_token_with_gated_access(hub, tmp_path, lab_tokens):
    main, unused_v1, d = _refs(hub, GATED)
    kw = dict(endpoint=hub.api, cache_dir=tmp_path)
    with pytest.raises(GatedRepoError) as no_token:
        hf_hub_download(GATED, "config.json", token=False, **kw)
    assert no_token.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as no_access:
        hf_hub_download(GATED, "config.json", token=lab_tokens["no_gated"], **kw)
    assert no_access.value.response.status_code == 403
    with pytest.raises(HfHubHTTPError) as unknown:
        hf_hub_download(GATED, "config.json", token="hf_notAtokenTheLabKnows000000000000", **kw)
    assert unknown.value.response.status_code == 401
    assert not isinstance(unknown.value, GatedRepoError)
    shard = _largest_lfs(hub, GATED)
    p = Path(hf_hub_download(GATED, shard["path"], token=lab_tokens["reader"], **kw))
    assert _sha256(p) == shard["lfs"]["sha256"]
    # Public repos need no token at all.
    hf_hub_download(TARGET, "config.json", token=False, **kw)
    log = hub.log()
    assert "hf_lab" not in str(log) and "hf_notAtoken" not in str(log), "the log must never hold tokens"
    cdn = [e for e in log if e["server"] == "cdn"]
    assert cdn and not any(e["auth_present"] for e in cdn), "the client drops Authorization for the CDN"


def test_resolve_headers_and_cdn_ranges(hub):
    shard = _largest_lfs(hub, TARGET)
    main = _refs(hub, TARGET)[0]
    meta = get_hf_file_metadata(hf_hub_url(TARGET, shard["path"], endpoint=hub.api))
    assert meta.commit_hash == main and meta.etag == shard["lfs"]["sha256"] and meta.size == shard["size"]
    loc = urllib.parse.urlsplit(meta.location)
    assert f"{loc.scheme}://{loc.netloc}" == hub.cdn and loc.path == f"/cdn/{shard['lfs']['sha256']}"
    blob = hub.blob(shard["lfs"]["sha256"]).read_bytes()
    conn = http.client.HTTPConnection(loc.hostname, loc.port, timeout=10)
    target = f"{loc.path}?{loc.query}"
    try:
        for rng, status, body in (("bytes=10-19", 206, blob[10:20]), ("bytes=-5", 206, blob[-5:]),
                                  (f"bytes={len(blob) - 3}-", 206, blob[-3:]), (None, 200, blob)):
            conn.request("GET", target, headers={"Range": rng} if rng else {})
            r = conn.getresponse()
            assert (r.status, r.read()) == (status, body), rng
            assert r.getheader("Accept-Ranges") == "bytes"
            assert int(r.getheader("Content-Length")) == len(body)
        conn.request("GET", target, headers={"Range": f"bytes={len(blob)}-"})
        r = conn.getresponse()
        r.read()
        assert r.status == 416 and r.getheader("Content-Range") == f"bytes */{len(blob)}"
    finally:
        conn.close()
    ids = {e["conn_id"] for e in hub.log(server="cdn")}
    assert len(ids) == 1, "one keep-alive connection served all five requests"


@pytest.mark.skipif(shutil.which("aria2c") is None, reason="aria2c not installed")
def test_aria2_ranged_download_through_signed_redirect(hub, tmp_path, lab_tokens):
    shard = _largest_lfs(hub, GATED)
    # Resolve on the API host with the token; aria2 only ever sees the signed CDN URL.
    meta = get_hf_file_metadata(hf_hub_url(GATED, shard["path"], endpoint=hub.api), token=lab_tokens["reader"])
    assert meta.location.startswith(hub.cdn + "/cdn/")
    splits = min(8, -(-shard["size"] // (1 << 20)))
    # aria2 opens its other connections once the first response's headers are in; on loopback the
    # first one could carry the whole file before they start (seen under load). The hub holds that
    # first body after 1 MiB until min(4, splits) requests for the file have arrived: an event, not
    # a time (seconds only bounds a client that never opens them, which then fails below).
    hub.faults({"name": "first-waits", "server": "cdn", "method": "GET", "path": "^/cdn/",
                "action": "hold", "after_bytes": 1 << 20, "requests": min(4, splits), "seconds": 60, "times": 1})
    mark = hub.last_seq()
    proc = subprocess.run(
        ["aria2c", "-x8", "-s8", "--min-split-size=1M", "--file-allocation=none", "--console-log-level=warn",
         "--summary-interval=0", "--max-tries=1", "--connect-timeout=5", "--timeout=20",
         "-d", str(tmp_path), "-o", "shard.safetensors", meta.location],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _sha256(tmp_path / "shard.safetensors") == shard["lfs"]["sha256"]
    cdn = [e for e in hub.log(since=mark) if e["server"] == "cdn"]
    ranges = {e["range"] for e in cdn if e["range"]}
    conns = {e["conn_id"] for e in cdn}
    held = [e for e in cdn if e["fault"] == "first-waits"]
    assert len(held) == 1 and "fewer than" not in (held[0]["error"] or ""), f"the first body was not released by requests: {held}"
    assert len(conns) >= min(4, splits), f"aria2 used {len(conns)} connections: {cdn}"
    assert len(ranges) >= min(4, splits) - 1, f"ranged requests: {sorted(ranges)}"
    assert not any(e["auth_present"] for e in cdn), "no Authorization may reach the CDN"
    assert not [e for e in hub.log(since=mark) if e["server"] == "api"], "aria2 never touched the API host"
