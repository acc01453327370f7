# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A revision's listing on the Hub, with retries: the token only once the Hub asks for it.

Private to the collection: not a public API, may change without notice.

Public repos are listed without a token; the token goes along only once the Hub says the repo
needs it (a private repo looks missing without one, a gated one answers 401). hf_snapshot lists
with it, and so does model_verify when it checks hashes against the Hub.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._hub.errors import SnapshotError, backoff

# Answers worth another try: timeouts, rate limits and the server's own errors.
_RETRY_STATUSES = (408, 429)
# The HTTP client under huggingface_hub raises transport errors that are not OSErrors.
_TRANSPORT_MODULES = ("httpx", "httpx2", "httpcore", "httpcore2")


def short(exc: BaseException) -> str:
    """The first line of an exception's text (at most 300 characters), or its type's name."""
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _hub_errors() -> Any:
    from huggingface_hub import errors  # late: the module reports a missing library itself

    return errors


class _AskWithToken(Exception):
    """The Hub's answer means: the repo needs the token (which we have and did not send)."""


_PERMANENT_TLS = ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed", "WRONG_VERSION_NUMBER")


def _retryable(exc: Exception, settings: Any, *, token: str | None, use_token: bool) -> str:
    """The text of a failure worth another try; raises for the ones no retry fixes.

    Raises _AskWithToken when the next try should send the token, SnapshotError when the revision,
    the repo or the access is wrong, and re-raises what does not come from the Hub or the network.
    """
    errors = _hub_errors()
    where = settings.endpoint_url
    if isinstance(exc, errors.RevisionNotFoundError):
        raise SnapshotError("revision %r of %s not found on %s: check the branch, tag or commit name"
                            % (settings.revision, settings.repo_id, where))
    if isinstance(exc, errors.RepositoryNotFoundError):
        if token and not use_token:
            raise _AskWithToken()  # private repos look missing without a token: ask again with it
        raise SnapshotError("repository %s not found on %s%s (%s)" % (
            settings.repo_id, where, "" if token else ", or private and no token given: set token or HF_TOKEN",
            short(exc)))
    if isinstance(exc, errors.HfHubHTTPError):
        status = _http_status(exc)
        if status == 401 and token and not use_token:
            raise _AskWithToken()
        if status in (401, 403):
            raise SnapshotError("the Hub refused to list %s (%s): %s" % (
                settings.repo_id, status, "check the token" if use_token else "it needs a token (set token or HF_TOKEN)"))
        last = "HTTP %s: %s" % (status, short(exc))
        if status is not None and status not in _RETRY_STATUSES and status < 500:
            raise SnapshotError("listing %s@%s failed: %s" % (settings.repo_id, settings.revision, last))
        return last
    if isinstance(exc, _hub.HubTLSError) and any(key in str(exc) for key in _PERMANENT_TLS):
        # A refused certificate is the same on every try: fail now, with the option that fixes it
        # (other TLS failures, such as a reset handshake, are retried like any network error).
        raise SnapshotError("listing %s on %s failed: %s" % (settings.repo_id, where, exc))
    if isinstance(exc, (OSError, ValueError)):
        return short(exc)
    if type(exc).__module__.split(".", maxsplit=1)[0] in _TRANSPORT_MODULES:
        return "%s: %s" % (type(exc).__name__, short(exc))
    raise exc


def list_remote(settings: Any, *, token: str | None, log: Callable[[str], None]) -> tuple[str, list, bool]:
    """(commit, [RemoteFile], used_token) with retries on 429/5xx; token only if the repo needs it.

    ``settings``: repo_id, revision, repo_type, endpoint (None: huggingface_hub's choice),
    endpoint_url (for messages), max_tries, retry_wait, proxy, validate_certs, ca_path, timeout.
    Switching to the token after the Hub asked for it (401, or a 404 that may mean private) is not a
    try: ``max_tries: 1`` still lists a private or gated repo. Every request goes to the endpoint's
    origin only (_hub.hf_api): a next page or redirect to another host is refused, never retried.
    """
    attempts = max(1, settings.max_tries)
    use_token = False
    last = None
    attempt = 0
    # Bounded: each pass either returns, raises, counts a try, or turns use_token on (once).
    while attempt < attempts:
        api = _hub.hf_api(endpoint=settings.endpoint, token=token if use_token else False,
                          http=_hub.HubHTTPConfig(proxy=settings.proxy, validate_certs=settings.validate_certs,
                                                  ca_path=settings.ca_path, timeout=settings.timeout))
        try:
            commit = _hub.resolve_commit(api, settings.repo_id, settings.revision, repo_type=settings.repo_type)
            files = _hub.list_revision(api, settings.repo_id, commit, repo_type=settings.repo_type)
            return commit, files, use_token
        except _hub.UntrustedAnswerError as exc:
            raise untrusted(settings, exc) from None
        except Exception as exc:  # pylint: disable=broad-except
            try:
                last = _retryable(exc, settings, token=token, use_token=use_token)
            except _AskWithToken:
                # the Hub asked for the token: ask again with it, at once; not a try of max_tries
                use_token = True
                continue
        attempt += 1
        if attempt < attempts:
            wait = backoff(settings.retry_wait, attempt)
            log("listing failed (%s), retry %d/%d in %.0f s" % (last, attempt, attempts, wait))
            time.sleep(wait)
    raise SnapshotError("listing %s@%s on %s failed %d time%s, last: %s"
                        % (settings.repo_id, settings.revision, settings.endpoint_url, attempts,
                           "" if attempts == 1 else "s", last or "no answer"))


def untrusted(settings: Any, exc: Exception) -> SnapshotError:
    """The failure for an answer no honest Hub gives: no retry can make it safe, so none is made."""
    return SnapshotError(
        "refusing what %s answered for %s: %s. The Hub never answers this: the endpoint (or a proxy or "
        "man-in-the-middle on the way to it) is broken or untrusted, so nothing was written and the listing "
        "is not retried; check endpoint, proxy and validate_certs" % (settings.endpoint_url, settings.repo_id, exc))
