# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Base URLs of routers and workers: checked once, and compared the way the router does not.

Private to the collection: not a public API, may change without notice. Standard library only.

sglang-router 0.3.2 keeps a worker's URL exactly as it was posted: ``http://10.0.0.1:30000``,
``http://10.0.0.1:30000/`` and ``http://HOST:30000`` are three workers to it (measured against the real
router). So a URL is posted in one spelling (``clean``: no trailing slash) and a listed one is matched
by ``same_worker``: scheme and host case-insensitive, the default port made explicit, trailing slashes
ignored.
"""
from __future__ import annotations

from urllib import parse as _urlparse

from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure

_DEFAULT_PORTS = {"http": 80, "https": 443}


def clean(url, what, example="http://10.0.4.11:30000"):
    """``url`` stripped of surrounding blanks and trailing slashes; ModuleFailure naming ``what`` when
    it is no http(s) base URL (credentials, a query or a fragment are refused: keys have their own options)."""
    if not isinstance(url, str) or not url.strip():
        raise ModuleFailure("%s is empty; give a base URL such as %s" % (what, example))
    text = url.strip().rstrip("/")
    try:
        parts = _urlparse.urlsplit(text)
        parts.port  # pylint: disable=pointless-statement  # raises ValueError on a port that is not a number
    except ValueError as exc:
        raise ModuleFailure("%s %r is not a valid URL (%s); use the form %s" % (what, text, exc, example))
    if parts.scheme not in ("http", "https"):
        raise ModuleFailure("%s %r: the scheme must be http or https (got %r); use the form %s"
                            % (what, text, parts.scheme, example))
    if not parts.hostname:
        raise ModuleFailure("%s %r has no host; use the form %s" % (what, text, example))
    if parts.username is not None or parts.password is not None:
        raise ModuleFailure("%s must not contain credentials (user:password@): the keys have their own options "
                            "(router_api_key, api_key)" % what)
    if parts.query or parts.fragment:
        raise ModuleFailure("%s %s://%s has a query or fragment; give only the base URL, for example %s"
                            % (what, parts.scheme, parts.netloc, example))
    return text


def passwords(params):
    """The password part of every URL option (refused by ``clean``, but the invocation must not echo it either)."""
    found = []
    for value in [params.get("url"), params.get("drain_url")] + list(params.get("routers") or []):
        try:
            secret = _urlparse.urlsplit(str(value or "").strip()).password
        except ValueError:
            secret = None
        if secret:
            found.append(secret)
    return found


def canonical(url):
    """The form two spellings of one worker share: (scheme, host, port, path without trailing slash)."""
    try:
        parts = _urlparse.urlsplit(str(url).strip())
        port = parts.port
    except ValueError:
        return ("", str(url).strip().rstrip("/").lower(), None, "")
    scheme = parts.scheme.lower()
    return (scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme), parts.path.rstrip("/"))


def same_worker(a, b):
    """Whether two URLs name the same worker (see the module docstring)."""
    return canonical(a) == canonical(b)
