# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fetch from a peer server as a peer would (python3 http.client: the lab image has no curl) and print, as JSON,
what each request got: status, body length and sha256, and the headers the test looks at. The token
comes from the environment (PEER_TOKEN) and is never printed."""
import hashlib
import http.client
import json
import os
import sys
import urllib.parse

BASE = urllib.parse.urlsplit(sys.argv[1])
TOKEN = os.environ["PEER_TOKEN"]


def ask(path, *, token=TOKEN, method="GET", headers=None):
    # http.client, not urllib.request: the path goes out exactly as written (no client-side clean-up).
    conn = http.client.HTTPConnection(BASE.hostname, BASE.port, timeout=30)
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = "Bearer " + token
    conn.request(method, path, headers=sent)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return dict(status=resp.status, length=len(body), sha256=hashlib.sha256(body).hexdigest(),
                content_length=resp.getheader("Content-Length"), content_range=resp.getheader("Content-Range"),
                server=resp.getheader("Server"), body=body[:200].decode("utf-8", "replace") if len(body) < 200 else "")


out = {}
for name, path in (("big", "/m/c1/big.bin"), ("config", "/m/c1/config.json"), ("nested", "/m/c1/sub/nested.txt"),
                   ("status", "/m/c1/.gpufleet/peer-status.json"), ("manifest", "/m/c1/.gpufleet/manifest.json"),
                   ("aria2", "/m/c1/big.bin.aria2"), ("incomplete", "/m/c1/part.incomplete"),
                   ("hfcache", "/m/c1/.cache/huggingface/download/big.bin.metadata"),
                   ("gitattributes", "/m/c1/.gitattributes"), ("symlink", "/m/c1/out"), ("symlink_dir", "/m/c1/outdir/passwd"),
                   ("listing", "/m/c1/"), ("dir", "/m/c1/sub"), ("other", "/m/other/file"),
                   ("dotdot", "/m/c1/../other/file"), ("dotdot_encoded", "/m/c1/%2e%2e/other/file"),
                   ("escape", "/m/c1/../../../etc/passwd"), ("missing", "/m/c1/nope")):
    out[name] = ask(path)
out["big_no_token"] = ask("/m/c1/big.bin", token=None)
out["big_wrong_token"] = ask("/m/c1/big.bin", token=TOKEN + "x")
out["missing_no_token"] = ask("/m/c1/nope", token=None)
out["range"] = ask("/m/c1/big.bin", headers={"Range": "bytes=100-199"})
out["head"] = ask("/m/c1/big.bin", method="HEAD")
out["post"] = ask("/m/c1/big.bin", method="POST")
print(json.dumps(out))
