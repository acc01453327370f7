# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""peer_serve's nginx configuration: checked arguments in, the text of one nginx.conf out (pure).

Private to the collection: not a public API, may change without notice. No Ansible imports, no I/O
beyond what ``check_settings`` reads to resolve ``root`` and the ``paths`` under it.

The config is the only place the token lives (the file is 0600 under a 0700 run directory, read by the
master running as root): nginx is started with ``-c <file> -g "daemon off;"`` and nothing else, so the
token is never on a command line, in a unit property or in a result. Every value that goes into the
file is checked against a small character set first, so nothing a caller passes can end a directive,
open a block or name a variable.
"""

from __future__ import annotations

import ipaddress
import os
import re
from typing import Any

DEFAULT_PORT = 8370
DEFAULT_RUNTIME_MAX_SEC = 21600
DEFAULT_NGINX = "/usr/sbin/nginx"
RUN_BASE = "/run/gpufleet-peer"
# The first line of every config this module writes: a config that does not start with it is not ours.
CONF_HEADER = "# gpufleet.llm peer_serve"
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")
# The run a server belongs to (the model role makes one per play): part of the unit and run directory names.
RUN = re.compile(r"^[a-z0-9]{1,16}$")
# Tokens go between double quotes in an `if`; this set needs no escaping there (base64, hex, url-safe).
TOKEN = re.compile(r"^[A-Za-z0-9._~+/=-]{16,512}$")
# Path segments and root: a conservative set that is literal in nginx's config syntax (no space, quote,
# semicolon, brace or $). A segment never starts with a dot: dot-names are never served anyway.
_SEGMENT = re.compile(r"^[A-Za-z0-9_@+=-][A-Za-z0-9._@+=-]*$")
_ROOT = re.compile(r"^/[A-Za-z0-9._@+=/-]*$")
# What nginx must never serve inside a served path: aria2's control files, staging names.
DENIED_SUFFIXES = ("aria2", "incomplete", "tmp")
PEER_STATUS = ".gpufleet/peer-status.json"


class SettingsError(Exception):
    """A bad argument: ``msg`` names it and the fix."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.msg = msg


def check_name(name: str) -> str:
    if not NAME.match(name or ""):
        raise SettingsError("name %r is not a peer server name: 1 to 41 characters of a-z, 0-9 and '-', starting "
                            "with a letter or digit (the unit is gpufleet-peer-<name>.service)" % (name,))
    return name


def check_run(run: str | None) -> str | None:
    if run is None or run == "":
        return None
    if not RUN.match(run):
        raise SettingsError("run %r is not a run id: 1 to 16 characters of a-z and 0-9 (the unit is "
                            "gpufleet-peer-<name>-<run>.service; the model role makes one per play)" % (run,))
    return run


def full_name(name: str, run: str | None = None) -> str:
    """<name>-<run>, or <name> without a run: what the unit and the run directory are named after."""
    return "%s-%s" % (name, run) if run else name


def unit_name(name: str) -> str:
    return "gpufleet-peer-%s.service" % name


def run_dir(name: str, *, base: str = RUN_BASE) -> str:
    return os.path.join(base, name)


def check_listen(listen: str | None, *, allow_loopback: bool = False) -> str:
    """The listen address, normalised; refused: a host name, anything that is not one IP address, and any
    address the other hosts cannot reach this host at (unspecified, loopback, multicast, link-local).

    Every peer is told to fetch from http://<listen>:<port>/: with 0.0.0.0 or 127.0.0.1 each host would
    fetch from itself. ``allow_loopback`` is for tests on one machine only (the module never sets it).
    """
    fix = "give the host's cluster address, the one its peers reach it at (model_peer_address, for example 10.0.0.11)"
    try:
        addr = ipaddress.ip_address((listen or "").strip())
    except ValueError:
        raise SettingsError("listen %r is not an IP address: %s, never a name or a 0.0.0.0-style wildcard"
                            % (listen, fix))
    # ::ffff:127.0.0.1 is 127.0.0.1: judge the IPv4 address it maps.
    plain = getattr(addr, "ipv4_mapped", None) or addr
    if getattr(addr, "scope_id", None):
        why = "has a scope id (%%%s): a zone is not a cluster address" % addr.scope_id
    elif plain.is_unspecified:
        why = ("is the unspecified (wildcard) address: every peer would be told to fetch from %s, that is from "
               "itself" % url(str(addr), DEFAULT_PORT).replace(":%d/" % DEFAULT_PORT, ":<port>/"))
    elif plain.is_loopback and not allow_loopback:
        why = "is a loopback address: every peer would fetch from itself, not from this host"
    elif plain.is_multicast:
        why = "is a multicast address: nginx cannot serve on it and no peer can connect to it"
    elif plain.is_link_local:
        why = ("is link-local (169.254.0.0/16, fe80::/10): an address a host gives itself when none was "
               "configured, reachable on one link only (an IPv6 one needs a zone, which peer URLs do not carry)")
    else:
        return str(addr)
    raise SettingsError("listen %s %s; %s" % (listen, why, fix))


def _check_root(root: str | None, *, missing_ok: bool) -> str:
    if not root or not os.path.isabs(root):
        raise SettingsError("root %r is not an absolute path: give the directory that holds the served paths "
                            "(for example model_models_root, /srv/models)" % (root,))
    real = os.path.realpath(root)
    # Check mode on a fresh host: the fetch that would create root has not run either.
    if not os.path.lexists(root) and missing_ok:
        real = os.path.normpath(root)
    elif not os.path.isdir(real):
        raise SettingsError("root %s is not a directory on this host: create it first or fix root" % root)
    if not _ROOT.match(real):
        raise SettingsError("root %s (resolved: %s) has characters peer_serve does not put into an nginx config: "
                            "use a path of letters, digits and . _ @ + = - /" % (root, real))
    return real


def _check_path(root: str, path: str) -> str:
    clean = (path or "").strip("/")
    segments = clean.split("/") if clean else []
    if not segments or os.path.isabs(path or "") or not all(_SEGMENT.match(s) for s in segments):
        raise SettingsError("path %r is not a directory relative to root: give one like <model>/<commit>, made of "
                            "letters, digits and . _ @ + = -, no '..', no segment starting with '.', no leading '/'"
                            % (path,))
    # A directory that exists now must not lead out of root (a symlink); one that does not exist yet
    # (the fetch creates it later) is only ever looked up by nginx with symlinks refused.
    real = os.path.realpath(os.path.join(root, clean))
    if os.path.lexists(os.path.join(root, clean)) and not (real + "/").startswith(root.rstrip("/") + "/"):
        raise SettingsError("path %r resolves to %s, outside root %s (through a symlink): serve only directories "
                            "inside root" % (path, real, root))
    return clean


def check_token(token: str | None) -> str:
    if not token:
        raise SettingsError("token is required with state=started: every request must carry it as "
                            "'Authorization: Bearer <token>' (the model role makes one per run)")
    if not TOKEN.match(token):
        # Never echo the token: say only what is wrong with it.
        raise SettingsError("token must be 16 to 512 characters of A-Z a-z 0-9 . _ ~ + / = - (it has %d "
                            "characters): generate it with, for example, lookup('ansible.builtin.password', "
                            "'/dev/null length=40 chars=ascii_letters,digits')" % len(token))
    return token


def check_settings(params: dict[str, Any], *, missing_root_ok: bool = False,
                   allow_loopback: bool = False) -> dict[str, Any]:
    """The arguments of state=started, checked and normalised (root resolved, paths without slashes).

    ``name`` in the result is the full name (<name>-<run> with a run). ``missing_root_ok``: a root that does
    not exist at all is taken as given (check mode). ``allow_loopback``: see check_listen (tests only).
    """
    name = full_name(check_name(params.get("name")), check_run(params.get("run")))
    root = _check_root(params.get("root"), missing_ok=missing_root_ok)
    paths = [_check_path(root, p) for p in params.get("paths") or []]
    if not paths:
        raise SettingsError("paths is empty: name the directories under root to serve (for example kimi/<commit>)")
    port = DEFAULT_PORT if params.get("port") is None else params["port"]
    if not 1 <= int(port) <= 65535:
        raise SettingsError("port %s is not a TCP port (1-65535)" % port)
    runtime = DEFAULT_RUNTIME_MAX_SEC if params.get("runtime_max_sec") is None else params["runtime_max_sec"]
    if int(runtime) < 1:
        raise SettingsError("runtime_max_sec %s must be at least 1 (seconds the server may live)" % runtime)
    nginx = params.get("nginx") or DEFAULT_NGINX
    if not os.path.isabs(nginx):
        raise SettingsError("nginx %r is not an absolute path (for example /usr/sbin/nginx)" % (nginx,))
    return dict(name=name, root=root, paths=sorted(set(paths)), listen=check_listen(params.get("listen"), allow_loopback=allow_loopback),
                port=int(port), token=check_token(params.get("token")), runtime_max_sec=int(runtime), nginx=nginx)


def listen_socket(listen: str, port: int) -> str:
    return ("[%s]:%d" if ":" in listen else "%s:%d") % (listen, port)


def url(listen: str, port: int) -> str:
    return "http://%s/" % listen_socket(listen, port)


def _served(path: str) -> list[str]:
    partial = "|".join(DENIED_SUFFIXES)
    return [
        # The one file under .gpufleet/ peers may read: the fetch's own status. An exact match wins
        # over every prefix and regex location.
        "    location = /%s/%s {" % (path, PEER_STATUS),
        "      try_files $uri =404;",
        "    }",
        # ^~: the server-level regexes are never consulted for these; the nested ones are.
        "    location ^~ /%s/ {" % path,
        # hf_snapshot's own directory (manifest, staging) and huggingface_hub's local-dir metadata
        # (.cache/) and partial downloads: as if absent. Other dot-files are the repo's own
        # (.gitattributes is in nearly every Hub repo) and are served like any verified file.
        "      location ~ /\\.(?:gpufleet|cache)(?:/|$) {",
        "        return 404;",
        "      }",
        "      location ~ \\.(?:%s)$ {" % partial,
        "        return 404;",
        "      }",
        # $uri only, never $uri/: a directory is not a file, so no listing and no index.
        "      try_files $uri =404;",
        "    }",
    ]


def render(settings: dict[str, Any], *, user: str, group: str, base: str = RUN_BASE) -> str:
    """The nginx.conf for ``settings`` (from check_settings); workers run as ``user``:``group``."""
    rdir = run_dir(settings["name"], base=base)
    lines = [
        CONF_HEADER,
        # Not directives: the rest of what the unit is started with, so that an equal file means an
        # equal server (idempotence compares the file alone).
        "# unit %s runtime_max_sec %d nginx %s" % (
            unit_name(settings["name"]), settings["runtime_max_sec"], settings["nginx"]),
        # Workers only read world-readable model files: an identity that owns nothing and cannot read
        # this file (0600, root) nor anything else private on the host.
        "user %s %s;" % (user, group),
        "worker_processes auto;",
        "pid %s/nginx.pid;" % rdir,
        "error_log stderr warn;",
        "events {",
        "  worker_connections 1024;",
        "}",
        "http {",
        "  types {}",
        "  default_type application/octet-stream;",
        "  sendfile on;",
        "  tcp_nopush on;",
        "  server_tokens off;",
        "  autoindex off;",
        "  log_not_found off;",
        "  reset_timedout_connection on;",
        # Everything nginx may write stays in the run directory (removed by state=stopped).
        "  client_body_temp_path %s/client_body;" % rdir,
        "  proxy_temp_path %s/proxy;" % rdir,
        "  fastcgi_temp_path %s/fastcgi;" % rdir,
        "  uwsgi_temp_path %s/uwsgi;" % rdir,
        "  scgi_temp_path %s/scgi;" % rdir,
        # Bytes first: bytes_sent is the sum of the first field. $request is the request line only,
        # never a header, so the token is never logged.
        "  log_format gpufleet_peer '$body_bytes_sent $status $remote_addr [$time_iso8601] \"$request\"';",
        "  access_log %s/access.log gpufleet_peer;" % rdir,
        "  server {",
        "    listen %s;" % listen_socket(settings["listen"], settings["port"]),
        "    server_name _;",
        "    root %s;" % settings["root"],
        # Every path component below root is opened with O_NOFOLLOW: no symlink is followed at all,
        # so none leads out of root (the model trees hold regular files and hard links only).
        "    disable_symlinks on from=$document_root;",
        # Server-level rewrite: runs before any location, for every request, even one for a path
        # that does not exist (no probing without the token).
        # A plain string comparison, not a map: a map's hash buckets limit the key length.
        "    if ($http_authorization != \"Bearer %s\") {" % settings["token"],
        "      return 401;",
        "    }",
        "    if ($request_method !~ ^(?:GET|HEAD)$) {",
        "      return 405;",
        "    }",
        "    location / {",
        "      return 404;",
        "    }",
    ]
    for path in settings["paths"]:
        lines.extend(_served(path))
    lines.extend(["  }", "}", ""])
    return "\n".join(lines)
