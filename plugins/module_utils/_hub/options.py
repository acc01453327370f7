# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a Hub option may hold: the token, the endpoint, the proxy and the CA bundle, checked before use.

Private to the collection: not a public API, may change without notice.

Each check returns why a value cannot be used (None: it can), naming the option and never the
value's secret part (a token, a URL's user:password).
"""

from __future__ import annotations

import os
import ssl
from urllib import parse as _urlparse


def clean_token(token: str | None) -> str | None:
    """``token`` without surrounding whitespace (a YAML block scalar's trailing newline), None when
    nothing is left. What is left is checked by ``token_problem``."""
    if not isinstance(token, str):
        return token
    return token.strip() or None


def token_problem(token: str | None, option: str = "token") -> str | None:
    """Why ``token`` cannot go into an Authorization header (None: it can), naming ``option``, never
    the token: after ``clean_token``, a space, a control character or a non-ASCII character would
    make the HTTP library refuse the header and print its value in the error."""
    if not token or not isinstance(token, str):
        return None
    if all("!" <= char <= "~" for char in token):
        return None
    return ("%s holds a space, a control character or a non-ASCII character inside it (surrounding whitespace is "
            "removed, inner characters are not): give the token exactly as the Hub shows it; check the variable "
            "it comes from for a stray line break, quote or space" % option)


HOST_TOKEN_OPTION = "the host's token (HF_TOKEN or the huggingface_hub token file)"


def host_token(given: str | None) -> str | None:
    """The token given, else the host's (HF_TOKEN, the token file), else None: what huggingface_hub
    itself would send, without surrounding whitespace. hf_snapshot and model_verify send it only
    once the Hub asks for it (a 401, or a 404 that may mean private). Its characters are checked
    by the options' checks (``token_problem``; ``host_token_problem`` for the host's)."""
    given = clean_token(given)
    if given:
        return given
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    return clean_token(get_token())


def host_token_problem(given: str | None) -> str | None:
    """``token_problem`` of the token ``host_token(given)`` finds, naming the option it came from."""
    if clean_token(given):
        return token_problem(clean_token(given), "token")
    return token_problem(host_token(None), HOST_TOKEN_OPTION)


def endpoint_problem(endpoint: str | None, option: str = "endpoint") -> str | None:
    """Why ``endpoint`` cannot be a Hub endpoint (None: it can), naming ``option``.

    It must be an http(s)://host[:port][/path] URL: no user info (it would be written into the
    manifest), no query or fragment. The URL is never shown: it may carry user:password.
    """
    if endpoint is None:
        return None
    form = "an http(s)://host[:port][/path] URL"
    if not isinstance(endpoint, str) or not endpoint.strip():
        return "%s must be %s, got an empty value" % (option, form)
    if endpoint != endpoint.strip() or any(char.isspace() or ord(char) < 32 or ord(char) == 127 for char in endpoint):
        return "%s must be %s without spaces or control characters" % (option, form)
    try:
        parts = _urlparse.urlsplit(endpoint)
        port = parts.port  # ValueError for a port that is no number or out of range
    except ValueError:
        return "%s is not %s (its host or port cannot be read)" % (option, form)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        scheme = parts.scheme if "://" in endpoint or parts.scheme == "file" else None
        return ("%s must be %s (for example https://hub.example:8443), got %s"
                % (option, form, "a URL with scheme %r" % scheme if scheme else "no http:// or https:// scheme"))
    if "@" in parts.netloc:
        return ("%s must be %s without user info (user:password@): it would be written into the manifest; give "
                "the credentials as token" % (option, form))
    if not parts.hostname:
        return "%s must be %s, got no host" % (option, form)
    if port == 0:
        return "%s must be %s, got port 0" % (option, form)
    if parts.query or parts.fragment or "?" in endpoint or "#" in endpoint:
        return "%s must be %s without a query (?...) or fragment (#...)" % (option, form)
    return None


def proxy_problem(proxy: str) -> str | None:
    """Why ``proxy`` cannot be used (None: it can): an http:// URL is what aria2's all-proxy and the
    listing's client both speak; a socks5:// one would fail deep inside the HTTP library. The URL
    itself is never shown: it may carry user:password."""
    try:
        parts = _urlparse.urlsplit(proxy)
        port = parts.port  # ValueError for a port that is no number or out of range
    except ValueError:
        return "proxy is not a valid http://[user:password@]host[:port] URL (its host or port cannot be read)"
    if parts.scheme != "http" or not parts.hostname:
        return ("proxy must be an http://[user:password@]host[:port] URL (what aria2 and the listing both "
                "support), got a URL with scheme %r" % (parts.scheme or "none"))
    if port == 0:
        return "proxy is not a valid http://[user:password@]host[:port] URL (port 0)"
    return None


def ca_path_problem(ca_path: str) -> str | None:
    """Why ``ca_path`` cannot be used (None: it can): a CA bundle that does not exist, cannot be read
    or does not parse would fail every TLS request, after retries."""
    if not os.path.isfile(ca_path):
        return ("ca_path %s does not exist or is not a file: give the PEM bundle of the CA that signs the "
                "endpoint's certificate" % ca_path)
    if not os.access(ca_path, os.R_OK):
        return "ca_path %s is not readable by this user: fix its permissions" % ca_path
    try:
        ssl.create_default_context(cafile=ca_path)
    except (ssl.SSLError, OSError, ValueError) as exc:
        return "ca_path %s is not a PEM CA bundle (%s): give the CA certificate(s) in PEM form" % (ca_path, exc)
    return None
