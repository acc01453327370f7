# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a Hub revision holds, through huggingface_hub (HfApi bound to our endpoint, proxy, TLS and timeout).

Private to the collection: not a public API, may change without notice.

Listing uses the tree API (paginated, every file with size and LFS sha256), not model_info's
siblings, which large repos truncate and some mirrors return without metadata. The revision is
resolved to a commit first and listed at that commit, so a branch moving mid-listing cannot mix
two commits.

The option checks are in options.py, URL resolving (the token never handed onward) in resolve.py,
the listing with retries in listing.py; the names the rest of the collection uses are all here.
"""

from __future__ import annotations

import collections
import collections.abc
import contextlib
import ssl
import threading
from urllib import parse as _urlparse
from collections.abc import Callable, Iterator
from typing import Any

# The rest of the collection reaches the Hub through this module: what the other _hub files own is
# named here too (the listing's answers, the options' checks, URL resolving, the shared http policy).
from ansible_collections.gpufleet.llm.plugins.module_utils._common.http import NoRedirect, ssl_context  # noqa: F401  pylint: disable=unused-import
from ansible_collections.gpufleet.llm.plugins.module_utils._hub.answers import (  # noqa: F401  pylint: disable=unused-import
    RemoteFile, UntrustedAnswerError, check_tree, checked_file, is_hex, shown)
from ansible_collections.gpufleet.llm.plugins.module_utils._hub.options import (  # noqa: F401  pylint: disable=unused-import
    HOST_TOKEN_OPTION, ca_path_problem, clean_token, endpoint_problem, host_token, host_token_problem, proxy_problem,
    token_problem)
from ansible_collections.gpufleet.llm.plugins.module_utils._hub.resolve import (  # noqa: F401  pylint: disable=unused-import
    DEFAULT_ENDPOINT, USER_AGENT, HubHTTPError, ResolvedURL, TokenLeakError, UnsafeRedirectError, error_message,
    repo_url_prefix, resolve_file, resolve_url_for, retry_after_seconds, same_origin, signed_url_expiry, url_opener)


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
