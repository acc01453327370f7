# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a file's bytes are: resolving a Hub file URL without ever handing the token onward.

Private to the collection: not a public API, may change without notice.

aria2 sends every --header / header= value to every host a redirect leads it to, so it never gets
the token with a URL that redirects. The token goes to the endpoint in a HEAD on /resolve/ that does
not follow the redirect; aria2 then gets the signed CDN URL (which authorises itself) and no header.
A URL the endpoint answers itself (``direct``: no redirect) needs the token on the GET too: that
GET is made in-process (_fetch/direct.py's download_direct), never by aria2, and does not follow
redirects either.
"""

from __future__ import annotations

import collections
import datetime
import re
import time
from email.utils import parsedate_to_datetime
from urllib import error as _urlerror
from urllib import parse as _urlparse
from urllib import request as _urlrequest

from ansible_collections.gpufleet.llm.plugins.module_utils._common.http import NoRedirect, ssl_context
from ansible_collections.gpufleet.llm.plugins.module_utils._hub.answers import UntrustedAnswerError, shown
from ansible_collections.gpufleet.llm.plugins.module_utils._hub.errors import SnapshotError

DEFAULT_ENDPOINT = "https://huggingface.co"
USER_AGENT = "gpufleet.llm-hf_snapshot"

# url: what to GET; direct: True when the endpoint itself serves the bytes (no redirect), so a
# gated/private repo's bytes need the token on that request; size/sha256/blob_id: what the resolve
# answer said (None when absent, e.g. mirrors without X-Linked-*); commit: X-Repo-Commit;
# expires: unix time after which a signed URL stops working (None when unknown).
ResolvedURL = collections.namedtuple("ResolvedURL", ["url", "direct", "size", "sha256", "etag", "commit", "expires"])


class HubHTTPError(Exception):
    """An HTTP answer from the Hub that is not what a resolve expects."""

    def __init__(self, status, message, retry_after=None, url=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after
        self.url = url


class TokenLeakError(Exception):
    """The Hub handed out a URL that contains the token: refuse to pass it on."""


class UnsafeRedirectError(SnapshotError, UntrustedAnswerError):
    """A resolve redirected to a URL aria2 must not be given (file://, ftp://, ...): an untrusted
    answer, reported by name and never retried (hf_snapshot reports it as it is)."""


def repo_url_prefix(endpoint, repo_id, repo_type="model"):
    base = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
    if repo_type == "dataset":
        return "%s/datasets/%s" % (base, repo_id)
    if repo_type == "space":
        return "%s/spaces/%s" % (base, repo_id)
    return "%s/%s" % (base, repo_id)


def resolve_url_for(endpoint, repo_id, commit, path, repo_type="model"):
    return "%s/resolve/%s/%s" % (
        repo_url_prefix(endpoint, repo_id, repo_type),
        _urlparse.quote(commit, safe=""),
        _urlparse.quote(path, safe="/"),
    )


def same_origin(url_a, url_b):
    a, b = _urlparse.urlsplit(url_a), _urlparse.urlsplit(url_b)
    return (a.scheme, a.hostname, a.port or _default_port(a.scheme)) == (
        b.scheme,
        b.hostname,
        b.port or _default_port(b.scheme),
    )


def _default_port(scheme):
    return 443 if scheme == "https" else 80


def retry_after_seconds(value, now=None):
    """Seconds a Retry-After header asks for (delta-seconds or an HTTP date), None if unusable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def url_opener(proxy=None, validate_certs=True, ca_path=None, follow_redirects=False):
    handlers = [_urlrequest.HTTPSHandler(context=ssl_context(validate_certs, ca_path))]
    # An explicit proxy wins; an empty dict turns off the environment's proxies only when asked.
    if proxy:
        handlers.append(_urlrequest.ProxyHandler({"http": proxy, "https": proxy}))
    if not follow_redirects:
        handlers.append(NoRedirect())
    return _urlrequest.build_opener(*handlers)


def _strip_quotes(value):
    if not value:
        return None
    value = value.strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"') or None


def signed_url_expiry(url: str) -> int | None:
    """Unix time a signed URL expires, when its query says so (None when it does not).

    CloudFront (the Hub's CDN): ``Expires=<unix time>``; the lab Hub: ``exp=``; S3-style presigned
    URLs (SigV4): ``X-Amz-Date=YYYYMMDDTHHMMSSZ`` plus ``X-Amz-Expires=<seconds>``.
    """
    query = _urlparse.parse_qs(_urlparse.urlsplit(url).query)
    for key in ("exp", "Expires", "expires"):
        if key in query and query[key][0].isdigit():
            return int(query[key][0])
    lowered = {key.lower(): values[0] for key, values in query.items()}
    signed_at, lifetime = lowered.get("x-amz-date"), lowered.get("x-amz-expires")
    if signed_at and lifetime and lifetime.isdigit():
        try:
            when = datetime.datetime.strptime(signed_at, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            return None
        return int(when.timestamp()) + int(lifetime)
    return None


def error_message(exc):
    message = exc.headers.get("X-Error-Message") if exc.headers else None
    if not message:
        try:
            body = exc.read(2048).decode("utf-8", "replace")
        except Exception:  # pylint: disable=broad-except
            body = ""
        match = re.search(r'"error"\s*:\s*"([^"]*)"', body)
        message = match.group(1) if match else (body.strip()[:200] or exc.reason)
    return "%s %s" % (exc.code, message)


def resolve_file(opener, endpoint, repo_id, commit, path, *, token=None, repo_type="model", timeout=60.0, max_hops=3):
    """HEAD the file's resolve URL (token only to the endpoint) and say where aria2 should GET it.

    Follows same-origin (relative) redirects itself, with the token; stops at the first redirect to
    another origin and returns that URL, which must carry its own authorisation (a signed URL).
    Raises HubHTTPError for 4xx/5xx answers (with Retry-After when given) and TokenLeakError when a
    URL to be handed on contains the token.
    """
    url = resolve_url_for(endpoint, repo_id, commit, path, repo_type)
    commit_seen = None
    sha256 = size = etag = None
    for dummy in range(max_hops + 1):
        req = _urlrequest.Request(url, method="HEAD", headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
        if token and same_origin(url, endpoint or DEFAULT_ENDPOINT):
            # unredirected: urllib must not carry it along if anything did follow a redirect
            req.add_unredirected_header("Authorization", "Bearer %s" % token)
        try:
            resp = opener.open(req, timeout=timeout)
            status, headers = resp.status, resp.headers
            resp.close()
        except _urlerror.HTTPError as exc:
            status, headers = exc.code, exc.headers
            if not 300 <= status < 400:
                raise HubHTTPError(status, error_message(exc), retry_after_seconds(headers.get("Retry-After")), url=path)
        commit_seen = headers.get("X-Repo-Commit") or commit_seen
        sha256 = _strip_quotes(headers.get("X-Linked-Etag")) or sha256
        linked_size = headers.get("X-Linked-Size")
        if linked_size and linked_size.isdigit():
            size = int(linked_size)
        etag = _strip_quotes(headers.get("ETag")) or etag
        if 300 <= status < 400:
            location = headers.get("Location")
            if not location:
                raise HubHTTPError(status, "%d redirect without a Location" % status, url=path)
            location = _urlparse.urljoin(url, location)
            scheme = _urlparse.urlsplit(location).scheme.lower()
            if scheme not in ("http", "https"):
                # aria2 would read a file:// URL from this host's disk (or speak ftp/sftp to anywhere)
                # and fail late as "aria2 stopped before this file finished".
                raise UnsafeRedirectError(
                    "refusing the Hub's answer for %s: its resolve redirects to a %s URL, not http(s). The Hub "
                    "never does this: the endpoint (or a proxy on the way) is broken or untrusted, so nothing was "
                    "handed to aria2 and the file is not retried; check endpoint and proxy"
                    % (shown(path), "%s:" % scheme if scheme else "scheme-less"))
            if same_origin(location, endpoint or DEFAULT_ENDPOINT):
                url = location
                continue
            if token and token in location:
                raise TokenLeakError("the Hub redirected %s to a URL that contains the token; refusing to hand it to aria2" % path)
            return ResolvedURL(location, False, size, sha256, etag, commit_seen, signed_url_expiry(location))
        if size is None:
            length = headers.get("Content-Length")
            size = int(length) if length and length.isdigit() else None
        return ResolvedURL(url, True, size, sha256, etag, commit_seen, None)
    raise HubHTTPError(310, "more than %d same-origin redirects resolving %s" % (max_hops, path), url=path)
