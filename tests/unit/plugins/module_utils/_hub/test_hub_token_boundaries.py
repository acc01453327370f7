# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the token may go, and what an endpoint may answer (issue 20, items 2, 3, 4, 10, 11, 12).

Against the real lab Hub on loopback (tests/lab/hub: its request log says on which host each
request landed and whether it carried an Authorization header), real aria2c and the real
huggingface_hub client; no mocks."""
from __future__ import annotations

import json
import os
import urllib.parse

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import listing as _snapshot_listing
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import settings as _snapshot_settings
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import verify as _verify
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError

TARGET = "gpufleet-lab/Kimi-K2.6-mini"
GATED = "gpufleet-lab/Kimi-K2.6-mini-gated"
TOKEN = "hf_labREADERfakeTOKENnotAsecret000001"  # tests/lab/fixtures.py, lab-only, fake
SHARD1 = "model-00001-of-000004.safetensors"


def lie(hub, repo=TARGET, **spec):
    """The lab Hub's listing control (README "Hostile listing"): private, next_origin, resolve_location, ..."""
    return hub.call("POST", "/_lab/listing", {"repos": {repo: spec}})


def run(hub, dest, **params):
    base = dict(repo_id=TARGET, revision="main", dest=str(dest), endpoint=hub.api, min_free_bytes=0, retry_wait=0,
                connections=2, splits=2, min_split_size="1M", max_tries=3)
    base.update(params)
    return _snapshot.snapshot(base)


def every_form(secret):
    return _secrets.forms(secret) + [secret.strip()]


def assert_no_secret(text, secret=TOKEN):
    for form in every_form(secret):
        assert form not in text, "a form of the token (%r) is shown: %s" % (form, text)


def listing_settings(hub, **over):
    values = dict(repo_id=TARGET, revision="main", dest="/nonexistent/d", endpoint=hub.api, max_tries=3,
                  retry_wait=0)
    values.update(over)
    return _snapshot_settings.Settings.from_params(values)


def api_log(hub):
    return list(hub.log(server="api"))


# --- item 3: every form of a secret is masked ------------------------------------------------------

@pytest.mark.parametrize("secret", [TOKEN, TOKEN + "\n", "hf_a\tb/c d+e%f\"g'h\\i\u00e9"])
def test_mask_hides_every_form_of_a_secret(secret):
    shown = [
        secret, secret.strip(), repr(secret), repr(secret.encode()), json.dumps(secret),
        json.dumps(secret, ensure_ascii=False), urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret),
        "LocalProtocolError: Illegal header value %r" % ("Bearer %s" % secret).encode(),
        repr(ValueError("Invalid header value %r" % ("Bearer " + secret).encode())),
    ]
    for text in shown:
        masked = _secrets.mask("before %s after" % text, secret)
        assert _secrets.MASK in masked
        for form in every_form(secret):
            assert form not in masked, (text, form, masked)


def test_mask_leaves_other_text_alone():
    assert _secrets.mask("nothing secret here", None, "", "absent") == "nothing secret here"
    assert _secrets.mask("a TOKEN b", "TOKEN") == "a ******** b"


# --- item 3: surrounding whitespace is stripped where the token enters; inner junk refused -----------

def test_snapshot_strips_a_token_with_a_trailing_newline(lab_hub, aria2c, tmp_path):
    """Today's main sent "Bearer hf_...\\n" and failed with the header's repr (the token) in the message."""
    res = run(lab_hub, tmp_path / "g", repo_id=GATED, token=TOKEN + "\n", max_tries=1,
              allow_patterns=["config.json", SHARD1])
    assert sorted(f["path"] for f in res["files"]) == ["config.json", SHARD1]
    assert_no_secret(json.dumps(res))
    authorised = [e for e in api_log(lab_hub) if e["auth_present"]]
    assert authorised and all(e["status"] < 400 for e in authorised)


@pytest.mark.parametrize("bad", [TOKEN[:8] + "\x01" + TOKEN[8:], TOKEN[:8] + " " + TOKEN[8:], TOKEN + "\u00e9",
                                 TOKEN[:8] + "\n" + TOKEN[8:]])
def test_snapshot_refuses_a_token_with_inner_junk_without_echoing_it(lab_hub, tmp_path, bad):
    with pytest.raises(SnapshotError) as err:
        run(lab_hub, tmp_path / "d", repo_id=GATED, token=bad)
    assert err.value.msg.startswith("token holds a space, a control character")
    assert_no_secret(err.value.msg + repr(err.value.fail_kwargs()), bad)
    assert api_log(lab_hub) == [], "refused before any request"


def test_snapshot_refuses_a_host_token_with_inner_junk(lab_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN[:8] + "\t" + TOKEN[8:])
    with pytest.raises(SnapshotError) as err:
        run(lab_hub, tmp_path / "d")
    assert "HF_TOKEN" in err.value.msg and "control character" in err.value.msg
    assert_no_secret(err.value.msg, TOKEN[:8] + "\t" + TOKEN[8:])
    assert TOKEN[8:] not in err.value.msg


def test_hub_false_does_not_check_the_hosts_token(tmp_path, monkeypatch):
    """A host without Hub access never sends its token: a broken HF_TOKEN there is not this run's concern."""
    monkeypatch.setenv("HF_TOKEN", TOKEN[:8] + "\t" + TOKEN[8:])
    settings = _snapshot_settings.Settings.from_params(dict(repo_id=TARGET, revision="a" * 40, dest=str(tmp_path / "d"),
                                                            hub=False, listing=[]))
    assert settings.token is None
    with pytest.raises(SnapshotError) as err:
        _snapshot_settings.Settings.from_params(dict(repo_id=TARGET, revision="a" * 40, dest=str(tmp_path / "d"),
                                                     hub=False, listing=[], token="a b"))
    assert err.value.msg.startswith("token holds")


def test_model_verify_strips_a_token_with_a_trailing_newline(lab_hub, tmp_path):
    """Private repo: today's main failed with "Illegal header value b'Bearer hf_...\\n'" in the problem line."""
    lie(lab_hub, private=True)
    res = _verify.verify(str(tmp_path), mode="quick", repo_id=TARGET, endpoint=lab_hub.api, token=TOKEN + "\n")
    assert res["expected_from"] == "hub", res["problems"]
    assert_no_secret(json.dumps(res))


@pytest.mark.parametrize("bad", [TOKEN[:8] + "\x7f" + TOKEN[8:], TOKEN[:8] + " " + TOKEN[8:]])
def test_model_verify_refuses_a_token_with_inner_junk(lab_hub, tmp_path, bad):
    with pytest.raises(_verify.ParamError) as err:
        _verify.verify(str(tmp_path), mode="quick", repo_id=TARGET, endpoint=lab_hub.api, token=bad)
    assert str(err.value).startswith("token holds a space")
    assert_no_secret(str(err.value), bad)
    assert api_log(lab_hub) == []


# --- item 2: the token goes only to the endpoint's origin ------------------------------------------

def test_snapshot_refuses_a_next_page_on_another_origin(lab_hub, tmp_path):
    """A private repo's listing whose next page is on another host (the lab's CDN, which logs whether
    an Authorization header came): today's main sent the token there."""
    lab_hub.config(tree_page_size=3)
    lie(lab_hub, private=True, next_origin="cdn")
    with pytest.raises(SnapshotError) as err:
        run(lab_hub, tmp_path / "d", token=TOKEN, resolve_only=True)
    msg = err.value.msg
    assert lab_hub.cdn in msg and "another origin" in msg and "not retried" in msg, msg
    assert_no_secret(msg)
    assert lab_hub.log(server="cdn") == [], "no request (and no token) reached the other host"
    trees = [e for e in api_log(lab_hub) if "/tree/" in e["path"]]
    assert len(trees) == 1 and trees[0]["auth_present"], "one page, with the token, from the endpoint; no retry"


def test_model_verify_refuses_a_next_page_on_another_origin(lab_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    lab_hub.config(tree_page_size=3)
    lie(lab_hub, private=True, next_origin="cdn")
    res = _verify.verify(str(tmp_path), mode="quick", repo_id=TARGET, endpoint=lab_hub.api)
    said = [p for p in res["problems"] if p.startswith("could not list")]
    assert said and lab_hub.cdn in said[0] and "another origin" in said[0], res["problems"]
    assert_no_secret(json.dumps(res))
    assert lab_hub.log(server="cdn") == []


def test_a_paginated_listing_is_read_whole_from_the_endpoint(lab_hub):
    lab_hub.config(tree_page_size=3)
    commit, files, used_token = _snapshot_listing.list_remote(listing_settings(lab_hub), token=TOKEN, log=print)
    sha, want = lab_hub.files_at(TARGET, "main")
    assert commit == sha and sorted(f.path for f in files) == sorted(want) and not used_token
    trees = [e for e in api_log(lab_hub) if "/tree/" in e["path"]]
    assert len(trees) > 2 and all("cursor=" in e["query"] for e in trees[1:])
    assert not any(e["auth_present"] for e in api_log(lab_hub))


def test_httpx_drops_authorization_on_a_cross_origin_redirect_and_our_client_refuses_it(lab_hub):
    """The resolve of an LFS file redirects from the API host to the CDN host (another origin)."""
    from huggingface_hub.utils import _http as hf_http  # pylint: disable=import-outside-toplevel

    httpx = getattr(hf_http, "httpx2", None) or getattr(hf_http, "httpx")
    url = _hub.resolve_url_for(lab_hub.api, TARGET, "main", SHARD1)
    with httpx.Client(follow_redirects=True) as plain:
        with plain.stream("GET", url, headers={"Authorization": "Bearer " + TOKEN}) as resp:
            assert resp.status_code == 200 and str(resp.url).startswith(lab_hub.cdn)
    cdn = lab_hub.log(server="cdn")
    assert len(cdn) == 1 and cdn[0]["auth_present"] is False, "httpx drops Authorization across origins"
    lab_hub.reset()
    config = _hub.HubHTTPConfig(proxy=None, validate_certs=True, ca_path=None, timeout=10)
    with _hub._client_factory(config, lab_hub.api)() as ours:  # pylint: disable=protected-access
        with pytest.raises(_hub.ForeignOriginError) as err:
            ours.get(url, headers={"Authorization": "Bearer " + TOKEN})
    assert lab_hub.cdn in str(err.value) and TOKEN not in str(err.value)
    assert lab_hub.log(server="cdn") == []


# --- item 4: switching to the token is not a try --------------------------------------------------

def test_max_tries_one_lists_a_private_repo(lab_hub):
    lie(lab_hub, private=True)
    commit, files, used_token = _snapshot_listing.list_remote(listing_settings(lab_hub, max_tries=1), token=TOKEN,
                                                              log=print)
    assert used_token and files and commit == lab_hub.files_at(TARGET, "main")[0]
    assert [e["auth_present"] for e in api_log(lab_hub)][:2] == [False, True]


def test_max_tries_one_never_says_last_none(lab_hub):
    lie(lab_hub, private=True)
    lab_hub.faults({"server": "api", "path": "/tree/", "status": 500})
    with pytest.raises(SnapshotError) as err:
        _snapshot_listing.list_remote(listing_settings(lab_hub, max_tries=1), token=TOKEN, log=print)
    assert "failed 1 time, last: HTTP 500" in err.value.msg and "None" not in err.value.msg, err.value.msg


# --- item 10: endpoint checked at once -----------------------------------------------------------

BAD_ENDPOINTS = [
    ("file:///etc", "scheme 'file'"),
    ("127.0.0.1:8080", "no http:// or https:// scheme"),
    ("localhost:8080", "no http:// or https:// scheme"),
    ("http://user:pass@127.0.0.1:1", "without user info"),
    ("http://127.0.0.1:1/?x=1", "without a query"),
    ("ftp://127.0.0.1/", "scheme 'ftp'"),
]


@pytest.mark.parametrize("endpoint,words", BAD_ENDPOINTS)
def test_snapshot_refuses_a_bad_endpoint_before_any_request(lab_hub, tmp_path, endpoint, words):
    with pytest.raises(SnapshotError) as err:
        run(lab_hub, tmp_path / "d", endpoint=endpoint, token=TOKEN)
    assert err.value.msg.startswith("endpoint must be an http(s)://host[:port][/path] URL") and words in err.value.msg
    assert "pass" not in err.value.msg.replace("password", "") and "user:" not in err.value.msg.replace("user:password", "")
    assert not (tmp_path / "d").exists()


def test_snapshot_names_a_bad_hf_endpoint(lab_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://me:secret@127.0.0.1:1")
    with pytest.raises(SnapshotError) as err:
        run(lab_hub, tmp_path / "d", endpoint=None)
    assert err.value.msg.startswith("HF_ENDPOINT") and "secret" not in err.value.msg


@pytest.mark.parametrize("endpoint,words", BAD_ENDPOINTS)
def test_model_verify_refuses_a_bad_endpoint(tmp_path, endpoint, words):
    with pytest.raises(_verify.ParamError) as err:
        _verify.check_params(path=str(tmp_path), repo_id=TARGET, endpoint=endpoint)
    assert str(err.value).startswith("endpoint must be") and words in str(err.value)
    assert ":pass@" not in str(err.value)


# --- item 11: model_verify sends a token only when the Hub asks -----------------------------------

def test_model_verify_lists_a_public_repo_without_the_hosts_token(lab_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    res = _verify.verify(str(tmp_path), mode="quick", repo_id=TARGET, endpoint=lab_hub.api)
    assert res["expected_from"] == "hub", res["problems"]
    requests = api_log(lab_hub)
    assert requests and not any(e["auth_present"] for e in requests), requests


def test_model_verify_sends_the_token_once_a_private_repo_asks(lab_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    lie(lab_hub, private=True)
    res = _verify.verify(str(tmp_path), mode="quick", repo_id=TARGET, endpoint=lab_hub.api)
    assert res["expected_from"] == "hub", res["problems"]
    requests = api_log(lab_hub)
    assert requests[0]["auth_present"] is False and requests[0]["status"] == 404
    assert all(e["auth_present"] and e["status"] == 200 for e in requests[1:])
    # token=False: none is sent, ever; the private repo is then missing.
    lab_hub.reset()
    lie(lab_hub, private=True)
    res = _verify.verify(str(tmp_path), mode="quick", repo_id=TARGET, endpoint=lab_hub.api, token=False)
    assert res["expected_from"] is None and not any(e["auth_present"] for e in api_log(lab_hub))


# --- item 12: a resolve redirected to a non-http(s) URL is refused by name ---------------------------

@pytest.mark.parametrize("location", ["file:///etc/passwd", "ftp://127.0.0.1/x", "sftp://127.0.0.1/x"])
def test_resolve_to_a_non_http_url_is_refused_by_name(lab_hub, aria2c, tmp_path, location):
    lie(lab_hub, resolve_location=location)
    with pytest.raises(SnapshotError) as err:
        run(lab_hub, tmp_path / "d", allow_patterns=[SHARD1])
    msg = err.value.msg
    scheme = location.split(":", 1)[0]
    assert "%s:" % scheme in msg and SHARD1 in msg and "not retried" in msg and "aria2 stopped" not in msg, msg
    assert len([e for e in api_log(lab_hub) if "/resolve/" in e["path"]]) == 1, "one resolve, no retry"
    assert not os.path.exists(str(tmp_path / "d" / SHARD1))
