"""The real huggingface_hub client against olah 0.5.4, a third-party Hub mirror, run offline.

Where olah behaves like the Hub, the test asserts the Hub behaviour. Where it deviates, a test
named ``test_deviation_*`` asserts the deviation itself, so a change in olah shows up as a
failure here instead of going unnoticed. Loopback only: olah's upstream is a local sentinel that
counts connection attempts (there must be none).
"""

import hashlib
import json
import os
import pathlib
import sys

import pytest
import requests

LAB = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(LAB))
sys.path.insert(0, str(LAB / "olah"))

import fixtures  # noqa: E402
from run_olah import start_olah  # noqa: E402

TARGET = fixtures.TARGET
DRAFTER = fixtures.DRAFTER
GATED = fixtures.GATED
SHARD3 = "model-00003-of-000004.safetensors"


@pytest.fixture(scope="module")
def olah():
    server = start_olah()
    old = os.environ.get("HF_ENDPOINT")
    os.environ["HF_ENDPOINT"] = server.url
    try:
        yield server
    finally:
        if old is None:
            os.environ.pop("HF_ENDPOINT", None)
        else:
            os.environ["HF_ENDPOINT"] = old
        server.stop()


@pytest.fixture(scope="module")
def hub(olah):
    # Imported after HF_ENDPOINT is set; the endpoint is also passed explicitly because another
    # test module may have imported huggingface_hub (which reads HF_ENDPOINT once) earlier.
    import huggingface_hub

    return huggingface_hub


@pytest.fixture(scope="module")
def api(hub, olah):
    return hub.HfApi(endpoint=olah.url, token=False)


@pytest.fixture(scope="module")
def root(olah):
    return fixtures.ensure_fixtures()


def store(root, repo_id):
    return json.loads((root / "store" / repo_id / "repo.json").read_text())


def files_at(root, repo_id, ref):
    repo = store(root, repo_id)
    sha = {**repo["refs"]["branches"], **repo["refs"]["tags"]}[ref]
    return sha, {f["path"]: f for f in repo["commits"][sha]["files"]}


def sha256_of(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def git_blob_sha1(data):
    return fixtures.git_blob_sha1(data)


# ----------------------------------------------------------------------------- Hub-faithful


@pytest.mark.parametrize("ref", ["main", "v1.0"])
def test_list_repo_tree_matches_fixture(api, root, ref):
    expected = files_at(root, TARGET, ref)[1]
    entries = list(api.list_repo_tree(TARGET, revision=ref, recursive=True))
    assert {e.path: e.size for e in entries} == {p: f["size"] for p, f in expected.items()}
    for e in entries:
        if expected[e.path]["lfs"] is None:
            assert e.blob_id == expected[e.path]["blob_id"]


def test_get_paths_info(api, root):
    expected = files_at(root, TARGET, "main")[1]
    infos = api.get_paths_info(TARGET, ["config.json", SHARD3], revision="main")
    assert sorted((i.path, i.size) for i in infos) == \
        sorted((p, expected[p]["size"]) for p in ("config.json", SHARD3))


@pytest.mark.parametrize("ref", ["main", "v1.0"])
def test_model_info_sha_and_file_names(api, root, ref):
    sha, expected = files_at(root, TARGET, ref)
    info = api.model_info(TARGET, revision=ref)
    assert info.sha == sha
    assert sorted(s.rfilename for s in info.siblings) == sorted(expected)


def test_model_info_without_revision_is_main(api, root):
    sha = files_at(root, TARGET, "main")[0]
    assert api.model_info(TARGET).sha == sha


def test_list_repo_refs(api, root):
    repo = store(root, TARGET)
    refs = api.list_repo_refs(TARGET)
    assert {b.name: b.target_commit for b in refs.branches} == repo["refs"]["branches"]
    assert {t.name: t.target_commit for t in refs.tags} == repo["refs"]["tags"]


def test_hf_hub_download_config_and_shard_byte_identical(hub, olah, root, tmp_path):
    sha, expected = files_at(root, TARGET, "main")
    for name in ("config.json", SHARD3):
        path = hub.hf_hub_download(TARGET, name, endpoint=olah.url, cache_dir=tmp_path,
                                   token=False)
        data = pathlib.Path(path).read_bytes()
        assert len(data) == expected[name]["size"]
        assert (root / "blobs" / hashlib.sha256(data).hexdigest()).read_bytes() == data
        assert f"/snapshots/{sha}/" in path
    lfs = expected[SHARD3]["lfs"]
    assert sha256_of(tmp_path / f"models--{TARGET.replace('/', '--')}" / "snapshots" / sha /
                     SHARD3) == lfs["sha256"]


def test_revision_update_changes_only_shard3_and_config(hub, olah, root, tmp_path):
    old_sha, old = files_at(root, TARGET, "v1.0")
    new_sha, new = files_at(root, TARGET, "main")
    for name in ("config.json", SHARD3, "model-00001-of-000004.safetensors"):
        a = pathlib.Path(hub.hf_hub_download(TARGET, name, revision="v1.0", endpoint=olah.url,
                                             cache_dir=tmp_path, token=False)).read_bytes()
        b = pathlib.Path(hub.hf_hub_download(TARGET, name, revision="main", endpoint=olah.url,
                                             cache_dir=tmp_path, token=False)).read_bytes()
        assert (a != b) == (name in ("config.json", SHARD3)), name
    assert sha256_of(tmp_path / f"models--{TARGET.replace('/', '--')}" / "snapshots" / old_sha /
                     SHARD3) == old[SHARD3]["lfs"]["sha256"]
    assert new[SHARD3]["lfs"]["sha256"] != old[SHARD3]["lfs"]["sha256"]


def test_file_metadata_from_head(hub, olah, root):
    sha, expected = files_at(root, TARGET, "main")
    meta = hub.get_hf_file_metadata(hub.hf_hub_url(TARGET, SHARD3, endpoint=olah.url),
                                    token=False)
    assert meta.commit_hash == sha
    assert meta.size == expected[SHARD3]["size"]


@pytest.mark.parametrize("repo_id,ref", [(TARGET, "main"), (TARGET, "v1.0"), (DRAFTER, "main")])
def test_snapshot_download_byte_identical(hub, olah, root, tmp_path, repo_id, ref):
    sha, expected = files_at(root, repo_id, ref)
    out = hub.snapshot_download(repo_id, revision=ref, endpoint=olah.url, cache_dir=tmp_path,
                                token=False)
    assert pathlib.Path(out).name == sha
    got = {p.relative_to(out).as_posix(): p for p in pathlib.Path(out).rglob("*") if p.is_file()}
    assert sorted(got) == sorted(expected)
    for name, entry in expected.items():
        data = got[name].read_bytes()
        assert len(data) == entry["size"], name
        digest = hashlib.sha256(data).hexdigest()
        if entry["lfs"]:
            assert digest == entry["lfs"]["sha256"], name
        else:
            assert git_blob_sha1(data) == entry["blob_id"], name


def test_missing_file_and_repo_errors(hub, api, olah, tmp_path):
    with pytest.raises(hub.errors.EntryNotFoundError):
        hub.hf_hub_download(TARGET, "nope.json", endpoint=olah.url, cache_dir=tmp_path,
                            token=False)
    with pytest.raises(hub.errors.RepositoryNotFoundError):
        api.model_info(f"{fixtures.ORG}/no-such-repo")


# ----------------------------------------------------------------------------- deviations


def test_deviation_model_info_omits_files_metadata(api):
    # Hub: siblings carry size and lfs.sha256 with files_metadata=True. olah: names only.
    info = api.model_info(TARGET, files_metadata=True)
    assert info.siblings
    assert all(s.size is None and s.lfs is None and s.blob_id is None for s in info.siblings)


def test_deviation_safetensors_not_reported_as_lfs(api, root):
    # Hub: *.safetensors are LFS files (lfs.sha256, blob_id of the pointer). olah recognises LFS
    # only from pointer blobs in git; the lab's git repos hold full content, so olah lists them
    # as regular blobs whose id is the git blob sha of the content.
    expected = files_at(root, TARGET, "main")[1]
    (entry,) = api.get_paths_info(TARGET, [SHARD3], revision="main")
    assert entry.lfs is None
    assert entry.blob_id != expected[SHARD3]["blob_id"]
    data = (root / "blobs" / expected[SHARD3]["lfs"]["sha256"]).read_bytes()
    assert entry.blob_id == git_blob_sha1(data)


def test_deviation_resolve_serves_bytes_without_linked_headers_or_cdn_redirect(olah, root):
    # Hub: LFS resolve answers 302 to a signed CDN URL with X-Linked-Etag (sha256) and
    # X-Linked-Size. olah: 200 from itself, ETag = git blob sha, no X-Linked-* headers.
    sha, expected = files_at(root, TARGET, "main")
    url = f"{olah.url}/{TARGET}/resolve/main/{SHARD3}"
    r = requests.head(url, allow_redirects=False, timeout=30)
    assert r.status_code == 200
    assert "x-linked-etag" not in r.headers and "x-linked-size" not in r.headers
    assert r.headers["x-repo-commit"] == sha
    assert int(r.headers["content-length"]) == expected[SHARD3]["size"]
    assert r.headers["etag"].strip('"') != expected[SHARD3]["lfs"]["sha256"]


def test_deviation_range_ignored(olah, root):
    # Hub/CDN: 206 with the requested bytes. olah 0.5.4 (local mirror): 200 with the whole file.
    expected = files_at(root, TARGET, "main")[1]
    r = requests.get(f"{olah.url}/{TARGET}/resolve/main/{SHARD3}",
                     headers={"Range": "bytes=0-99"}, timeout=60)
    assert r.status_code == 200
    assert len(r.content) == expected[SHARD3]["size"]


def test_deviation_get_chunked_without_content_length(olah, root):
    # Hub: GET carries Content-Length (and X-Repo-Commit, ETag). olah: chunked, none of those;
    # clients must take the size from HEAD.
    with requests.get(f"{olah.url}/{TARGET}/resolve/main/config.json", stream=True,
                      timeout=30) as r:
        assert r.status_code == 200
        assert r.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in r.headers
        assert "x-repo-commit" not in r.headers and "etag" not in r.headers


def test_deviation_list_repo_commits_breaks_client(api, olah, root):
    # olah's commit authors lack the "user" key huggingface_hub expects (KeyError), and titles
    # keep git's trailing newline.
    with pytest.raises(KeyError, match="user"):
        api.list_repo_commits(TARGET)
    raw = requests.get(f"{olah.url}/api/models/{TARGET}/commits/main", timeout=30).json()
    repo = store(root, TARGET)
    assert [c["id"] for c in raw] == [repo["refs"]["branches"]["main"],
                                      repo["refs"]["tags"]["v1.0"]]
    assert all("user" not in a for c in raw for a in c["authors"])
    assert raw[0]["title"].endswith("\n")


def test_deviation_gated_repo_served_without_token(hub, api, olah, root, tmp_path):
    # Hub: a gated repo refuses anonymous downloads (401/403, GatedRepoError). olah has no notion
    # of gating for local mirrors: gated=False and the file is served to anyone.
    assert store(root, GATED)["gated"] is True
    assert api.model_info(GATED).gated is False
    path = hub.hf_hub_download(GATED, "config.json", endpoint=olah.url, cache_dir=tmp_path,
                               token=False)
    assert json.loads(pathlib.Path(path).read_text())["model_type"] == "kimi_k25"


def test_deviation_unknown_revision_is_500(hub, api):
    # Hub: 404 RevisionNotFoundError. olah: GitPython raises inside the handler, 500.
    with pytest.raises(hub.errors.HfHubHTTPError) as err:
        api.model_info(TARGET, revision="deadbeef" * 5)
    assert not isinstance(err.value, hub.errors.RevisionNotFoundError)
    assert err.value.response.status_code == 500


def test_deviation_tree_redirects_to_trailing_slash(olah):
    r = requests.get(f"{olah.url}/api/models/{TARGET}/tree/main", allow_redirects=False,
                     timeout=30)
    assert r.status_code == 307
    assert r.headers["location"].endswith(f"/api/models/{TARGET}/tree/main/")


def test_deviation_needs_seeded_main_revision_cache(hub, root, tmp_path):
    # Without the revision/main cache entries an online olah would have fetched, repo info without
    # a revision and missing files both answer 401 "Repository not found" (Hub: 200 / 404).
    server = start_olah(repos=[TARGET], seed_revisions=())
    try:
        api = hub.HfApi(endpoint=server.url, token=False)
        with pytest.raises(hub.errors.RepositoryNotFoundError):
            api.model_info(TARGET)
        r = requests.head(f"{server.url}/{TARGET}/resolve/main/nope.json", timeout=30)
        assert r.status_code == 401
        # Explicit revisions still resolve from git.
        assert api.model_info(TARGET, revision="v1.0").sha == files_at(root, TARGET, "v1.0")[0]
        assert server.upstream.connections == 0
    finally:
        server.stop()


def test_olah_runs_from_its_own_pinned_venv(olah):
    import subprocess

    import run_olah

    python = run_olah.ensure_olah_venv(fixtures.default_cache_dir())
    assert f"olah=={run_olah.OLAH_VERSION}" in run_olah.REQUIREMENTS.read_text().split()
    version = subprocess.run([str(python), "-c", "import olah, importlib.metadata as m; "
                              "print(m.version('olah'))"], capture_output=True, text=True, check=False)
    assert version.stdout.strip() == run_olah.OLAH_VERSION
    # Its dependency pins stay out of the controller venv.
    controller = subprocess.run([sys.executable, "-c", "import olah"], capture_output=True, check=False)
    assert controller.returncode != 0


def test_never_contacts_upstream(olah):
    # Runs last in this module: everything above went through olah without any upstream attempt.
    assert olah.proc.poll() is None, olah.log_text()[-2000:]
    assert olah.upstream.connections == 0
    assert "huggingface.co" not in (olah.workdir / "olah.toml").read_text()
