"""The lab Hub's hostile-listing control (/_lab/listing): a broken or hostile mirror, as the real
client (huggingface_hub) sees it. hf_snapshot's answer to it is tested in
tests/unit/plugins/module_utils/_fetch/test_snapshot_hostile.py."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url

TARGET = "gpufleet-lab/Kimi-K2.6-mini"
DRAFTER = "gpufleet-lab/Kimi-K2.6-mini-DFlash"
GATED = "gpufleet-lab/Kimi-K2.6-mini-gated"
SHARD = "model-00001-of-000004.safetensors"


def listing(hub, body=None, method="POST", query=""):
    return hub._call(method, "/_lab/listing" + query, body)  # pylint: disable=protected-access


def tree(hub, repo=TARGET):
    return {e.path: e for e in HfApi(endpoint=hub.api).list_repo_tree(repo, recursive=True) if hasattr(e, "blob_id")}


def test_listing_lies_only_where_told(hub):
    honest = tree(hub)
    real_config_oid = honest["config.json"].blob_id
    answer = listing(hub, {"repos": {TARGET: {"files": {
        "config.json": {"oid": "x/../../../victim"},
        SHARD: {"lfs_oid": "../../../victim"},
        "tokenizer_config.json": {"path": "../../x/victim", "size": -1},
    }}}})
    assert answer["repos"][TARGET]["files"]["config.json"] == {"oid": "x/../../../victim"}
    lied = tree(hub)
    assert lied["config.json"].blob_id == "x/../../../victim"
    assert lied[SHARD].lfs.sha256 == "../../../victim" and lied[SHARD].size == honest[SHARD].size
    assert "tokenizer_config.json" not in lied and lied["../../x/victim"].size == -1
    untouched = set(honest) - {"config.json", SHARD, "tokenizer_config.json"}
    assert {p: (lied[p].blob_id, lied[p].size) for p in untouched} == {p: (honest[p].blob_id, honest[p].size) for p in untouched}
    # paths-info lies the same way; other repos do not lie
    info = HfApi(endpoint=hub.api).get_paths_info(TARGET, ["config.json"])
    assert info[0].blob_id == "x/../../../victim"
    assert all(len(e.blob_id) == 40 for e in tree(hub, DRAFTER).values())
    # the bytes are still served under the real path: only the listing lies
    meta = get_hf_file_metadata(hf_hub_url(TARGET, "config.json", endpoint=hub.api))
    assert meta.etag == real_config_oid
    # drop removes keys of the entry (a.b: of its lfs object)
    listing(hub, {"repos": {TARGET: {"files": {"config.json": {"drop": ["size"]}, SHARD: {"drop": ["lfs.oid"]}}}}})
    raw = {e["path"]: e for e in hub._call("GET", f"/api/models/{TARGET}/tree/main?recursive=true")}  # pylint: disable=protected-access
    assert "size" not in raw["config.json"] and "oid" in raw["config.json"]
    assert "oid" not in raw[SHARD]["lfs"] and raw[SHARD]["lfs"]["size"] == honest[SHARD].size
    # reset ends the lies
    hub.reset()
    assert listing(hub, method="GET") == {"repos": {}}
    assert tree(hub)["config.json"].blob_id == real_config_oid


def test_omit_sha_and_leak_token(hub, lab_tokens):
    listing(hub, {"repos": {TARGET: {"omit_sha": True}, GATED: {"leak_token": True}}})
    api = HfApi(endpoint=hub.api)
    assert api.model_info(TARGET).sha is None
    assert api.model_info(DRAFTER).sha  # only the repo told
    url = hf_hub_url(GATED, SHARD, endpoint=hub.api)
    meta = get_hf_file_metadata(url, token=lab_tokens["reader"])
    assert "token=" + lab_tokens["reader"] in meta.location
    # append adds a repo, a plain POST replaces them all; DELETE clears
    listing(hub, {"repos": {DRAFTER: {"omit_sha": True}}}, query="?append=true")
    assert set(listing(hub, method="GET")["repos"]) == {TARGET, GATED, DRAFTER}
    listing(hub, {"repos": {DRAFTER: {"omit_sha": True}}})
    assert set(listing(hub, method="GET")["repos"]) == {DRAFTER}
    listing(hub, method="DELETE")
    assert api.model_info(TARGET).sha and api.model_info(DRAFTER).sha
    assert "token=" not in get_hf_file_metadata(url, token=lab_tokens["reader"]).location


def test_private_next_origin_and_resolve_location(hub, lab_tokens):
    """private: 404 without a token; next_origin: the tree's next page is announced on another host
    (huggingface_hub follows it there, with the same Authorization header); resolve_location: the
    resolve redirect's Location, whatever it is."""
    from huggingface_hub.errors import RepositoryNotFoundError  # pylint: disable=import-outside-toplevel

    listing(hub, {"repos": {TARGET: {"private": True, "next_origin": "cdn", "resolve_location": "file:///etc/passwd"}}})
    hub.config(tree_page_size=3)
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub.api).model_info(TARGET)
    api = HfApi(endpoint=hub.api, token=lab_tokens["reader"])
    assert api.model_info(TARGET).sha
    with pytest.raises(Exception):  # the CDN host has no API: the page is a 404 there
        list(api.list_repo_tree(TARGET, recursive=True))
    cdn = hub.log(server="cdn")
    assert len(cdn) == 1 and "/tree/" in cdn[0]["path"] and "cursor=" in cdn[0]["query"]
    assert cdn[0]["auth_present"], "what the client does unguarded: the token goes to the other host"
    req = urllib.request.Request(hf_hub_url(TARGET, SHARD, endpoint=hub.api), method="HEAD",
                                 headers={"Authorization": "Bearer " + lab_tokens["reader"]})

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.build_opener(NoRedirect).open(req, timeout=10)
    assert err.value.code == 302 and err.value.headers["Location"] == "file:///etc/passwd"
    # an origin instead of "cdn"; other repos page on their own origin
    listing(hub, {"repos": {TARGET: {"next_origin": "http://127.0.0.9:1"}}})
    with urllib.request.urlopen(hub.api + "/api/models/%s/tree/main?recursive=true" % TARGET, timeout=10) as resp:
        assert resp.headers["Link"].startswith("<http://127.0.0.9:1/api/models/%s/tree/main?" % TARGET)
    with urllib.request.urlopen(hub.api + "/api/models/%s/tree/main?recursive=true" % DRAFTER, timeout=10) as resp:
        assert resp.headers["Link"].startswith("<%s/api/models/%s/tree/main?" % (hub.api, DRAFTER))


@pytest.mark.parametrize("body", [
    {"rules": []},
    {"repos": {TARGET: {"next_origin": "ftp://x"}}},
    {"repos": {TARGET: {"resolve_location": ""}}},
    {"repos": []},
    {"repos": {TARGET: {"bogus": 1}}},
    {"repos": {TARGET: {"files": {"config.json": {"sha": "x"}}}}},
    {"repos": {TARGET: {"files": {"config.json": {}}}}},
    {"repos": {TARGET: {"files": ["config.json"]}}},
    {"repos": {TARGET: {"files": {"config.json": {"drop": "size"}}}}},
])
def test_bad_listing_specs_are_400(hub, body):
    req = urllib.request.Request(hub.api + "/_lab/listing", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)  # pylint: disable=consider-using-with
    assert err.value.code == 400
    assert listing(hub, method="GET") == {"repos": {}}
