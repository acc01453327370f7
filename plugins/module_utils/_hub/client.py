# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a Hub revision holds, through huggingface_hub.

Private to the collection: not a public API, may change without notice.

Listing uses the tree API (paginated, every file with size and LFS sha256), not model_info's
siblings, which large repos truncate and some mirrors return without metadata. The revision is
resolved to a commit first and listed at that commit, so a branch moving mid-listing cannot mix
two commits.
"""

from __future__ import annotations

import collections
import collections.abc
import contextlib
import datetime
import os
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from email.utils import parsedate_to_datetime
from typing import Any
from urllib import error as _urlerror
from urllib import parse as _urlparse
from urllib import request as _urlrequest

# The listing's answers are checked where they enter (_hub_answers); their names are _hub's too.
from ansible_collections.gpufleet.llm.plugins.module_utils._hub.answers import (  # noqa: F401  pylint: disable=unused-import
    RemoteFile, UntrustedAnswerError, check_tree, checked_file, is_hex, shown)
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError


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


def hf_api(endpoint: str | None = None, token: str | bool | None = None, *,
           http: HubHTTPConfig | None = None) -> _ConfiguredApi:
    """An HfApi bound to ``endpoint`` (None: HF_ENDPOINT or the public Hub) and ``token``, whose every
    call reaches the Hub as ``http`` says: through its ``proxy`` (None: the environment's), checking
    TLS as its ``validate_certs`` / ``ca_path`` say, giving up on a request silent for its ``timeout``
    seconds (None: never; the listing calls take no per-call timeout, so a stalled endpoint or proxy
    would block for ever). ``http=None``: all of those defaults.

    ``token=None`` lets huggingface_hub find the host's token (HF_TOKEN, token file); pass False to
    send none.
    """
    from huggingface_hub import HfApi  # imported late: the module reports a missing library itself

    return _ConfiguredApi(HfApi(endpoint=endpoint, token=token),
                          http or HubHTTPConfig(proxy=None, validate_certs=True, ca_path=None, timeout=None))


class HubHTTPConfig(collections.namedtuple("HubHTTPConfig", ["proxy", "validate_certs", "ca_path", "timeout"],
                                           defaults=(None,))):
    """How huggingface_hub's own HTTP client reaches the Hub during one of our calls."""

    __slots__ = ()

    def __repr__(self) -> str:
        # a proxy URL may carry credentials: never in a repr (tracebacks, test failures)
        return "HubHTTPConfig(proxy=%s, validate_certs=%r, ca_path=%r, timeout=%r)" % (
            "<set>" if self.proxy else None, self.validate_certs, self.ca_path, self.timeout)


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


class HubTLSError(OSError):
    """The endpoint's TLS certificate was refused (or the handshake failed): says which option fixes it."""


# huggingface_hub keeps ONE client for the whole process (get_session) and builds it with a global
# factory. Our options must reach it, yet never outlive our call: tests and long-lived processes run
# many fetches with different proxies/CAs in one interpreter. So each call installs a factory for its
# options under this lock and puts the previous factory back (closing the client built for it).
_CLIENT_LOCK = threading.RLock()


class ForeignOriginError(UntrustedAnswerError):
    """A request of ours (a listing's next page, a redirect) would go to another origin than the
    endpoint's: refused before it is sent, so neither the token nor our trust goes there."""


def origin_of(url: str) -> str:
    """scheme://host[:port] of ``url``, never its user info, path or query (for messages)."""
    parts = _urlparse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "?"
    if ":" in host:
        host = "[%s]" % host
    return "%s://%s%s" % (parts.scheme or "?", host, ":%d" % port if port else "")


def _same_origin_guard(origin: str | None) -> Callable[[Any], None]:
    """An httpx request hook: every request made during our call goes to ``origin`` or not at all.

    huggingface_hub follows a listing's ``Link: <...>; rel="next"`` to whatever host it names and
    sends the same headers (the token) there; httpx drops Authorization on a cross-origin redirect
    but would still fetch the page. An honest Hub keeps both on its own origin, so anything else is
    an untrusted answer: refused by name, before a byte (or the token) leaves.
    """

    def hook(request: Any) -> None:
        if origin is None:
            return
        url = str(request.url)
        if same_origin(url, origin):
            return
        request.headers.pop("Authorization", None)  # never sent, even if a caller swallowed the error
        raise ForeignOriginError(
            "the endpoint %s sent the listing on to another origin, %s (a next-page Link or a redirect); refusing to "
            "follow it: the token goes only to the endpoint, and a page from another host is not the Hub's answer"
            % (origin_of(origin), origin_of(url)))

    return hook


def _client_factory(config: HubHTTPConfig, origin: str | None = None) -> Callable[[], Any]:
    from huggingface_hub.utils import _http as hf_http  # late, as in hf_api

    # the HTTP library huggingface_hub itself uses (httpx2 in 2.x, httpx in 1.x)
    httpx = getattr(hf_http, "httpx2", None) or getattr(hf_http, "httpx")
    if not config.validate_certs:
        verify: Any = False
    elif config.ca_path:
        verify = ssl_context(True, config.ca_path)
    else:
        verify = True  # huggingface_hub's own default

    def factory() -> Any:
        # Ours first: a request to another origin is refused before huggingface_hub's hook logs it.
        kwargs: dict[str, Any] = {"event_hooks": {"request": [_same_origin_guard(origin), hf_http.hf_request_event_hook]},
                                  "follow_redirects": True, "timeout": config.timeout, "verify": verify}
        if config.proxy:
            kwargs["proxy"] = config.proxy
        return httpx.Client(**kwargs)

    return factory


@contextlib.contextmanager
def hub_http(config: HubHTTPConfig, origin: str | None = None) -> Iterator[None]:
    """huggingface_hub's shared client follows ``config`` inside the block, and what it was after.

    ``origin``: the endpoint; every request to another origin is refused (ForeignOriginError).
    """
    import huggingface_hub
    from huggingface_hub.utils import _http as hf_http

    with _CLIENT_LOCK:
        previous = getattr(hf_http, "_GLOBAL_CLIENT_FACTORY", None) or hf_http.default_client_factory
        huggingface_hub.set_client_factory(_client_factory(config, origin))
        try:
            yield
        except Exception as exc:  # pylint: disable=broad-except
            tls = _tls_failure(exc)
            if tls is None:
                raise
            raise HubTLSError("TLS with the Hub failed (%s): %s" % (tls, _tls_advice(tls, config))) from exc
        finally:
            huggingface_hub.set_client_factory(previous)


def _tls_advice(failure: str, config: HubHTTPConfig) -> str:
    if "CERTIFICATE_VERIFY_FAILED" not in failure and "certificate verify failed" not in failure:
        # not a trust question (e.g. plain http on an https endpoint's port): no CA would help
        return "check that the endpoint (and the proxy) speak TLS where the URL says https"
    if config.ca_path:
        return "the endpoint's certificate is not signed by ca_path %s: set ca_path to the CA that signed it" % config.ca_path
    return "set ca_path to the CA bundle that signed the endpoint's certificate (or validate_certs: false)"


def _tls_failure(exc: BaseException) -> str | None:
    """The TLS error in ``exc``'s chain (the HTTP library wraps ssl's), None if there is none."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ssl.SSLError):
            return str(getattr(exc, "reason", None) or exc).splitlines()[0][:200]
        text = str(exc)
        if "CERTIFICATE_VERIFY_FAILED" in text or "WRONG_VERSION_NUMBER" in text:
            return text.splitlines()[0][:200]
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


class _ConfiguredApi(object):
    """HfApi whose calls run under ``hub_http(config)``; a generator (list_repo_tree) is read whole
    inside, so no page is fetched after the client was put back."""

    def __init__(self, api: Any, config: HubHTTPConfig) -> None:
        self._api = api
        self._config = config
        # Every request of a call goes to the endpoint's origin (HfApi.endpoint: ours, else
        # HF_ENDPOINT, else the public Hub) or is refused.
        self._origin = getattr(api, "endpoint", None) or DEFAULT_ENDPOINT
        # Calls that take a per-call timeout pass None by default, which overrides the client's:
        # callers hand them this one.
        self.timeout = config.timeout

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._api, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            with hub_http(self._config, self._origin):
                answer = method(*args, **kwargs)
                if isinstance(answer, collections.abc.Iterator):
                    answer = list(answer)
                return answer

        return call


def resolve_commit(api, repo_id, revision, repo_type="model"):
    """The 40-hex commit sha that ``revision`` (branch, tag or sha) names right now.

    Raises UntrustedAnswerError when the answer carries no such sha (a mirror without ``sha``).
    """
    info = api.repo_info(repo_id, revision=revision, repo_type=repo_type, timeout=getattr(api, "timeout", None))
    sha = getattr(info, "sha", None)
    if not is_hex(sha, 40):
        raise UntrustedAnswerError("its answer for revision %r of %s carries no 40-hex commit sha (got %s)"
                                   % (revision, repo_id, shown(sha)))
    return sha


def list_revision(api, repo_id, commit, repo_type="model"):
    """Every file of ``repo_id`` at ``commit``, as RemoteFile, sorted by path.

    Every id and path is checked as it arrives (UntrustedAnswerError): they name staging files and
    final paths, so a listing must never be able to point outside the destination.
    """
    try:
        entries = list(api.list_repo_tree(repo_id, revision=commit, repo_type=repo_type, recursive=True))
    except (KeyError, TypeError, AttributeError) as exc:
        # huggingface_hub builds each entry from the JSON as it comes: a missing or mistyped field
        # surfaces here, from the answer, not from a bug of ours.
        raise UntrustedAnswerError("the listing of %s@%s is malformed (%s: %s)"
                                   % (repo_id, commit, type(exc).__name__, shown(str(exc))))
    files = []
    for entry in entries:
        if not hasattr(entry, "blob_id"):  # a folder
            continue
        lfs = getattr(entry, "lfs", None)
        files.append(checked_file(repo_id, commit, entry.path, size=entry.size, blob_id=entry.blob_id,
                                  sha256=lfs.sha256 if lfs else None, lfs=bool(lfs)))
    files.sort(key=lambda f: f.path)
    check_tree(repo_id, commit, files)
    return files


# ----------------------------------------------------------------------------- URL resolving
#
# aria2 sends every --header / header= value to every host a redirect leads it to, so it never gets
# the token with a URL that redirects. The token goes to the endpoint in a HEAD on /resolve/ that does
# not follow the redirect; aria2 then gets the signed CDN URL (which authorises itself) and no header.
# A URL the endpoint answers itself (``direct``: no redirect) needs the token on the GET too: that
# GET is made in-process (_transfer_direct.download_direct), never by aria2, and does not follow redirects either.

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


class NoRedirect(_urlrequest.HTTPRedirectHandler):
    """The collection's one redirect guard: a 3xx comes back to the caller as an HTTPError.

    The Hub client reads the signed URL from its Location (the token never follows it); the SGLang
    client reports it as it is, since SGLang never redirects and a 3xx means something else answers.
    """

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def ssl_context(validate_certs=True, ca_path=None):
    if not validate_certs:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cafile=ca_path) if ca_path else ssl.create_default_context()


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
