# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""peer_serve's nginx config: what is served and denied, where the token goes, and the argument checks."""
from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._peerserve import nginx as _peer_nginx
from ansible_collections.gpufleet.llm.plugins.module_utils._peerserve.nginx import SettingsError

TOKEN = "Tok3n-peer.serve_abcdefgh"


def params(root_dir, **over):
    out = dict(name="fleet", root=str(root_dir), paths=["kimi/" + "a" * 40], listen="10.231.0.12", port=8370,
               token=TOKEN, runtime_max_sec=600, nginx="/usr/sbin/nginx")
    out.update(over)
    return out


def render(root, **over):
    return _peer_nginx.render(_peer_nginx.check_settings(params(root, **over)), user="nobody", group="nogroup",
                              base="/run/gpufleet-peer")


def test_config_serves_only_the_paths_with_the_denials(tmp_path):
    text = render(tmp_path, paths=["kimi/" + "a" * 40, "dflash/" + "b" * 40 + "/"])
    assert text.startswith(_peer_nginx.CONF_HEADER + "\n")
    assert "root %s;" % os.path.realpath(str(tmp_path)) in text
    assert "location ^~ /kimi/%s/ {" % ("a" * 40) in text and "location ^~ /dflash/%s/ {" % ("b" * 40) in text
    assert "location = /kimi/%s/.gpufleet/peer-status.json {" % ("a" * 40) in text
    # Everything else is 404, .gpufleet/, .cache/ and partial downloads too (a repo's own dot-files are served); no listing, no symlinks, no version.
    assert "    location / {\n      return 404;" in text
    assert "location ~ /\\.(?:gpufleet|cache)(?:/|$) {\n        return 404;" in text
    assert "location ~ \\.(?:aria2|incomplete|tmp)$ {\n        return 404;" in text
    assert "try_files $uri =404;" in text and "$uri/" not in text
    assert "disable_symlinks on from=$document_root;" in text
    assert "server_tokens off;" in text and "autoindex off;" in text and "sendfile on;" in text
    assert "listen 10.231.0.12:8370;" in text and "user nobody nogroup;" in text
    # nginx writes only in its run directory.
    for key in ("pid", "access_log", "client_body_temp_path", "proxy_temp_path", "fastcgi_temp_path",
                "uwsgi_temp_path", "scgi_temp_path"):
        assert "%s /run/gpufleet-peer/fleet/" % key in text, key
    assert "error_log stderr" in text


def test_token_is_in_the_auth_check_only_and_checked_before_any_location(tmp_path):
    text = render(tmp_path)
    assert text.count(TOKEN) == 1
    auth = text.index('    if ($http_authorization != "Bearer %s") {\n      return 401;' % TOKEN)
    assert auth < text.index("location")
    assert "$http_authorization" not in text.split("log_format", 1)[1].split(";", 1)[0]


def test_equal_settings_render_equal_files_and_every_setting_shows(tmp_path):
    base = render(tmp_path)
    assert base == render(tmp_path, paths=["kimi/" + "a" * 40 + "/", "kimi/" + "a" * 40])
    for change in (dict(port=8371), dict(listen="10.231.0.13"), dict(token=TOKEN + "x"), dict(runtime_max_sec=60),
                   dict(nginx="/opt/nginx/sbin/nginx"), dict(paths=["kimi/" + "c" * 40])):
        assert render(tmp_path, **change) != base, change


def test_ipv6_listen_and_url(tmp_path):
    text = render(tmp_path, listen="fd00::0012")
    assert "listen [fd00::12]:8370;" in text
    assert _peer_nginx.url("fd00::12", 8370) == "http://[fd00::12]:8370/"
    assert _peer_nginx.url("10.0.0.1", 8370) == "http://10.0.0.1:8370/"


@pytest.mark.parametrize("over, words", [
    (dict(name="Fleet"), "name 'Fleet' is not a peer server name"),
    (dict(name="-x"), "is not a peer server name"),
    (dict(root="relative/dir"), "is not an absolute path"),
    (dict(paths=["../etc"]), "is not a directory relative to root"),
    (dict(paths=["kimi/../../etc"]), "is not a directory relative to root"),
    (dict(paths=["kimi/.gpufleet"]), "no segment starting with '.'"),
    (dict(paths=["kimi/a b"]), "is not a directory relative to root"),
    (dict(paths=["kimi/a;b"]), "is not a directory relative to root"),
    (dict(paths=[]), "paths is empty"),
    (dict(paths=["/srv/models/kimi"]), "no leading '/'"),
    (dict(listen="gpu1"), "listen 'gpu1' is not an IP address"),
    (dict(listen=None), "is not an IP address"),
    (dict(token=None), "token is required with state=started"),
    (dict(token="short"), "16 to 512 characters"),
    (dict(port=70000), "is not a TCP port"),
    (dict(runtime_max_sec=0), "must be at least 1"),
    (dict(nginx="nginx"), "is not an absolute path"),
])
def test_bad_arguments_are_named(tmp_path, over, words):
    with pytest.raises(SettingsError) as exc:
        _peer_nginx.check_settings(params(tmp_path, **over))
    assert words is None or words in exc.value.msg


def test_bad_token_is_never_echoed(tmp_path):
    bad = 'abcdefghijklmnop"; } evil'
    with pytest.raises(SettingsError) as exc:
        _peer_nginx.check_settings(params(tmp_path, token=bad))
    assert bad not in exc.value.msg and "evil" not in exc.value.msg


def test_root_must_be_a_directory(tmp_path):
    with pytest.raises(SettingsError, match="is not a directory on this host"):
        _peer_nginx.check_settings(params(tmp_path / "missing"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(SettingsError, match="is not a directory on this host"):
        _peer_nginx.check_settings(params(tmp_path / "file"))


def test_a_path_through_a_symlink_out_of_root_is_refused(tmp_path):
    root = tmp_path / "root"
    (root / "kimi").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(str(tmp_path / "outside"), str(root / "kimi" / "c1"))
    with pytest.raises(SettingsError, match="outside root"):
        _peer_nginx.check_settings(params(root, paths=["kimi/c1"]))
    # Not there yet (the fetch makes it later): fine; nginx follows no symlink anyway.
    assert _peer_nginx.check_settings(params(root, paths=["kimi/c2"]))["paths"] == ["kimi/c2"]


def test_root_through_a_symlink_is_resolved(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(str(tmp_path / "real"), str(tmp_path / "link"))
    settings = _peer_nginx.check_settings(params(tmp_path / "link"))
    assert settings["root"] == os.path.realpath(str(tmp_path / "real"))


# Issue 20 item 9: every peer is told to fetch from http://<listen>:<port>/, so an address the other hosts do
# not reach this host at is refused at once, with the option and the fix named.
@pytest.mark.parametrize("listen, words", [
    ("0.0.0.0", "unspecified (wildcard) address: every peer would be told to fetch from http://0.0.0.0:<port>/"),
    ("::", "unspecified (wildcard) address"),
    ("127.0.0.1", "is a loopback address"),
    ("127.3.0.9", "is a loopback address"),
    ("::1", "is a loopback address"),
    ("::ffff:127.0.0.1", "is a loopback address"),
    ("224.0.0.1", "is a multicast address"),
    ("ff02::1", "is a multicast address"),
    ("169.254.10.1", "is link-local"),
    ("fe80::1", "is link-local"),
    ("fe80::1%eth0", "has a scope id"),
])
def test_listen_addresses_peers_cannot_reach_are_refused(tmp_path, listen, words):
    with pytest.raises(SettingsError) as exc:
        _peer_nginx.check_settings(params(tmp_path, listen=listen))
    assert exc.value.msg.startswith("listen %s " % listen) and words in exc.value.msg
    assert "cluster address" in exc.value.msg and "model_peer_address" in exc.value.msg


def test_loopback_only_with_the_test_escape(tmp_path):
    # Tests on one machine only: the module never passes allow_loopback; the wildcard stays refused.
    settings = _peer_nginx.check_settings(params(tmp_path, listen="127.0.0.1"), allow_loopback=True)
    assert settings["listen"] == "127.0.0.1"
    with pytest.raises(SettingsError, match="unspecified"):
        _peer_nginx.check_settings(params(tmp_path, listen="0.0.0.0"), allow_loopback=True)


def test_run_is_part_of_the_names(tmp_path):
    text = render(tmp_path, run="k3j9x2ab")
    assert "pid /run/gpufleet-peer/fleet-k3j9x2ab/nginx.pid;" in text
    assert "# unit gpufleet-peer-fleet-k3j9x2ab.service " in text
    for bad in ("UP", "a-b", "x" * 17):
        with pytest.raises(SettingsError, match="is not a run id"):
            _peer_nginx.check_settings(params(tmp_path, run=bad))
