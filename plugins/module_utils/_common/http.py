# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's one TLS policy and one redirect guard, for every urllib client (Hub, SGLang).

Private to the collection: not a public API, may change without notice. Standard library only.
"""

from __future__ import annotations

import ssl
from urllib import request as _urlrequest


class NoRedirect(_urlrequest.HTTPRedirectHandler):
    """The collection's one redirect guard: a 3xx comes back to the caller as an HTTPError.

    The Hub client reads the signed URL from its Location (the token never follows it); the SGLang
    client reports it as it is, since SGLang never redirects and a 3xx means something else answers.
    """

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def ssl_context(validate_certs=True, ca_path=None):
    """An SSLContext that checks the peer (against ``ca_path`` when given), or checks nothing."""
    if not validate_certs:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cafile=ca_path) if ca_path else ssl.create_default_context()
