# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Bad hf_snapshot parameters fail at once with a message naming the fix (issue 10, item 7):
never a traceback, never a request to the Hub, never minutes of retries."""
from __future__ import annotations

import os
import ssl

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import settings as _snapshot_settings


def settings(**params):
    return _snapshot_settings.Settings.from_params(dict(dict(repo_id="org/name", dest="/srv/m"), **params))


def a_ca_bundle():
    """Some PEM CA bundle on this controller (certifi's or the system's)."""
    candidates = [ssl.get_default_verify_paths().cafile, "/etc/ssl/certs/ca-certificates.crt"]
    try:
        import certifi  # pylint: disable=import-outside-toplevel

        candidates.insert(0, certifi.where())
    except ImportError:
        pass
    for path in candidates:
        if path and os.path.isfile(path):
            return path
    pytest.skip("no PEM CA bundle on this controller")
    return None


@pytest.mark.parametrize("params,words", [
    (dict(repo_id="org/name/extra"), ["repo_id", "org/name/extra", "namespace/repo_name"]),
    (dict(repo_id="datasets/org/name"), ["repo_id", "Use `repo_type`"]),
    (dict(repo_id="org/na--me"), ["repo_id", "--"]),
    (dict(repo_id="org/name.git"), ["repo_id", ".git"]),
    (dict(repo_id="org/-name"), ["repo_id", "alphanumeric"]),
    (dict(repo_id="org/" + "n" * 97), ["repo_id", "96"]),
    (dict(hash_workers=0), ["hash_workers must be at least 1", "got 0"]),
    (dict(hash_workers=-4), ["hash_workers must be at least 1"]),
    (dict(min_split_size="512K"), ["min_split_size must be 1M-1024M", "512K"]),
    (dict(min_split_size="1048575"), ["min_split_size must be 1M-1024M"]),
    (dict(min_split_size="1025M"), ["min_split_size must be 1M-1024M"]),
    (dict(min_split_size="0"), ["min_split_size must be 1M-1024M"]),
    (dict(timeout=0), ["timeout must be 1-600", "got 0"]),
    (dict(timeout=601), ["timeout must be 1-600"]),
    (dict(retry_wait=-1), ["retry_wait must be 0-600"]),
    (dict(retry_wait=601), ["retry_wait must be 0-600"]),
    (dict(lock_timeout=-1), ["lock_timeout must be at least 0"]),
    (dict(min_free_bytes=-1), ["min_free_bytes must be at least 0"]),
    (dict(proxy="socks5://u:pw@127.0.0.1:1080"), ["proxy must be an http://", "'socks5'"]),
    (dict(proxy="ftp://127.0.0.1:21"), ["proxy must be an http://", "'ftp'"]),
    (dict(proxy="proxy.corp:3128"), ["proxy must be an http://"]),
    # a URL urllib cannot read (was a ValueError traceback) or a port no connection can use (was
    # minutes of listing retries, InvalidURL each)
    (dict(proxy="http://u:pw@[::1:3128"), ["proxy is not a valid http://", "host or port"]),
    (dict(proxy="http://u:pw@proxy:port"), ["proxy is not a valid http://"]),
    (dict(proxy="http://u:pw@proxy:99999"), ["proxy is not a valid http://"]),
    (dict(proxy="http://u:pw@proxy:0"), ["proxy is not a valid http://", "port 0"]),
])
def test_bad_parameter_is_named(params, words):
    with pytest.raises(_snapshot.SnapshotError) as err:
        settings(**params)
    for word in words:
        assert word in err.value.msg, (word, err.value.msg)
    assert "pw@" not in err.value.msg  # a proxy's credentials are never shown


def test_ca_path_missing_directory_or_not_pem(tmp_path):
    cases = [
        (str(tmp_path / "missing.pem"), "does not exist"),
        (str(tmp_path), "not a file"),
    ]
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    cases.append((str(junk), "not a PEM CA bundle"))
    for ca_path, words in cases:
        with pytest.raises(_snapshot.SnapshotError) as err:
            settings(ca_path=ca_path)
        assert ca_path in err.value.msg and words in err.value.msg, err.value.msg


def test_ca_path_unreadable(tmp_path, monkeypatch):
    # As root every file is readable: os.access decides, so the test asks it, not the mode bits.
    bundle = tmp_path / "ca.pem"
    bundle.write_text("x")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if path == str(bundle) else real_access(path, mode))
    with pytest.raises(_snapshot.SnapshotError) as err:
        settings(ca_path=str(bundle))
    assert "not readable" in err.value.msg


@pytest.mark.parametrize("params", [
    dict(repo_id="gpt2"),
    dict(repo_id="Org-1/Name_2.v3"),
    dict(min_split_size="1M"),
    dict(min_split_size="1048576"),
    dict(min_split_size="1024K"),
    dict(min_split_size="1024M"),
    dict(timeout=600, retry_wait=0, lock_timeout=0, min_free_bytes=0),
    dict(hash_workers=1),
    dict(hash_workers=None),
])
def test_good_parameters_pass(params):
    settings(**params)


def test_a_real_ca_bundle_passes():
    assert settings(ca_path=a_ca_bundle()).ca_path


@pytest.mark.parametrize("params,words", [
    (dict(repo_id="org/name/extra"), "repo_id 'org/name/extra' is not a Hub repo id"),
    (dict(timeout=0), "timeout must be"),
    (dict(min_split_size="64K"), "min_split_size must be"),
    (dict(hash_workers=0), "hash_workers must be"),
    (dict(ca_path="/nonexistent/ca.pem"), "ca_path /nonexistent/ca.pem does not exist"),
])
def test_bad_parameters_never_reach_the_hub(lab_hub, tmp_path, params, words):
    base = dict(repo_id="gpufleet-lab/Kimi-K2.6-mini", dest=str(tmp_path / "d"), endpoint=lab_hub.api,
                max_tries=5, retry_wait=2)
    with pytest.raises(_snapshot.SnapshotError) as err:
        _snapshot.snapshot(dict(base, **params))
    assert words in err.value.msg  # the parameter and its fix, not the listing's last retry
    assert lab_hub.log() == []
    assert not (tmp_path / "d").exists()
