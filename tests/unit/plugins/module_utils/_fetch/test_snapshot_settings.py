# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_snapshot_settings: one argument spec, its defaults for direct callers too, and the checks."""
from __future__ import annotations

import dataclasses

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import settings as _snapshot_settings


def test_bad_input_messages(tmp_path):
    for params, words in (
        (dict(repo_id="a/b", dest="relative"), "absolute"),
        (dict(repo_id="a/b", dest=str(tmp_path), connections=17), "1-16"),
        (dict(repo_id="a/b", dest=str(tmp_path), min_split_size="huge"), "min_split_size"),
    ):
        with pytest.raises(_snapshot.SnapshotError) as err:
            _snapshot.snapshot(params)
        assert words in err.value.msg


@pytest.mark.parametrize("params,words", [
    (dict(repo_id="", dest="/x"), "not a Hub repo id"),
    (dict(repo_id="bad id!", dest="/x"), "not a Hub repo id"),
    (dict(repo_id="a/b", dest="/x", repo_type="bucket"), "repo_type"),
    (dict(repo_id="a/b", dest="/x", connections=0), "1-16"),
    (dict(repo_id="a/b", dest="/x", splits=0), "splits must be at least 1"),
    (dict(repo_id="a/b", dest="/x", parallel_files=0), "parallel_files must be at least 1"),
    (dict(repo_id="a/b", dest="/x", max_tries=0), "max_tries must be at least 1"),
])
def test_checks(params, words):
    with pytest.raises(_snapshot.SnapshotError) as err:
        _snapshot_settings.Settings.from_params(params)
    assert words in err.value.msg


def test_defaults_come_from_the_module_spec(monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    spec = _snapshot_settings.argument_spec()
    settings = _snapshot_settings.Settings.from_params({"repo_id": "org/m", "dest": "/srv/m/", "connections": None})
    fields = {f.name for f in dataclasses.fields(settings)}
    assert fields - {"endpoint_url"} == set(spec)
    for key, option in spec.items():
        if "default" in option:
            assert getattr(settings, key) == option["default"], key
    assert settings.parallel_files == 6 and settings.connections == 16  # None means the default
    assert settings.dest == "/srv/m" and settings.endpoint_url == _hub.DEFAULT_ENDPOINT and settings.link_from == []
    assert "progress_interval" not in spec and "aria2_checksum" not in spec
    assert spec["token"]["no_log"] is True


def test_endpoint_link_from_and_token(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.invalid")
    settings = _snapshot_settings.Settings.from_params({
        "repo_id": "org/m", "dest": "/srv/m/v2", "link_from": "/srv/m/v1/", "token": "hf_secret"})
    assert settings.endpoint is None and settings.endpoint_url == "http://mirror.invalid"
    assert settings.link_from == ["/srv/m/v1"]
    assert "hf_secret" not in repr(settings)
    settings = _snapshot_settings.Settings.from_params({
        "repo_id": "org/m", "dest": "/srv/m/v2", "endpoint": "http://hub.invalid/",
        "link_from": ["/srv/m/v2/", "", "/srv/m/v1/../v0"]})
    assert settings.endpoint == settings.endpoint_url == "http://hub.invalid"
    assert settings.link_from == ["/srv/m/v0"]  # never dest itself
