# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""proxy, validate_certs and ca_path reach the listing (huggingface_hub's own client), and stay there:
hf_snapshot's listing and model_verify's in repo_id mode (issue 10 item 4).

A forward proxy of our own (plain http, it counts what it forwards) and a TLS front for the lab Hub
signed by a private CA made here, both on loopback; the lab Hub is tests/unit/plugins/conftest.py's.
"""
from __future__ import annotations

import contextlib
import datetime
import http.client
import http.server
import ipaddress
import os
import selectors
import socket
import ssl
import threading
import urllib.parse

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import verify as _verify

TARGET = "gpufleet-lab/Kimi-K2.6-mini"
HOP_BY_HOP = ("connection", "keep-alive", "transfer-encoding", "proxy-connection", "proxy-authorization")


def check_mode_run(hub, dest, **params):
    base = dict(repo_id=TARGET, revision="main", dest=str(dest), endpoint=hub.api, min_free_bytes=0,
                allow_patterns=["config.json"], max_tries=1, retry_wait=0)
    base.update(params)
    return _snapshot.snapshot(base, check_mode=True)


def _pipe_both(one, other):
    """Relay bytes between two sockets until either side closes, in ONE thread: an SSL socket must
    not be read in one thread while another writes it (OpenSSL does not support that)."""
    peers = {one: other, other: one}
    selector = selectors.DefaultSelector()
    for sock in peers:
        selector.register(sock, selectors.EVENT_READ)
    try:
        while True:
            for key, dummy in selector.select():
                src = key.fileobj
                while True:
                    data = src.recv(65536)
                    if not data:
                        return
                    peers[src].sendall(data)
                    # TLS may hold decrypted bytes the socket no longer signals as readable.
                    if not (isinstance(src, ssl.SSLSocket) and src.pending()):
                        break
    except OSError:  # ssl.SSLError is an OSError
        pass
    finally:
        selector.close()
        for sock in peers:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class CountingProxy(object):
    """A forward proxy: absolute-form http requests and CONNECT tunnels, each one recorded."""

    def __init__(self):
        self.seen = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # pylint: disable=arguments-differ
                pass

            def _forward(self):
                target = urllib.parse.urlsplit(self.path)
                if target.scheme != "http":
                    self.send_error(501, "this test proxy forwards plain http only")
                    return
                proxy.seen.append((self.command, target.path))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                try:
                    conn.request(self.command, target.path + ("?" + target.query if target.query else ""),
                                 body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(resp.getheader("Content-Length") or len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_POST = _forward

            def do_CONNECT(self):  # pylint: disable=invalid-name
                host, port = self.path.rsplit(":", 1)
                proxy.seen.append(("CONNECT", self.path))
                upstream = socket.create_connection((host, int(port)))
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                _pipe_both(self.connection, upstream)
                upstream.close()
                self.close_connection = True

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy():
    running = CountingProxy()
    yield running
    running.close()


def _make_ca(name):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _server_cert(ca_key, ca_cert):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lab hub")]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


def _pem(path, *objects):
    from cryptography.hazmat.primitives import serialization

    with open(path, "wb") as handle:
        for obj in objects:
            if hasattr(obj, "private_bytes"):
                handle.write(obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
            else:
                handle.write(obj.public_bytes(serialization.Encoding.PEM))
    return str(path)


class TLSFront(object):
    """TLS on loopback in front of the lab Hub's API host: each connection relayed byte for byte."""

    def __init__(self, upstream, certfile):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(certfile)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = "https://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.handshakes = 0
        self.accepted = 0  # counted before the server's first byte, so before any client can fail
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                raw, dummy = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw):
        try:
            tls = self.ctx.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()  # the client refused our certificate: what the wrong-CA test wants
            return
        self.handshakes += 1
        back = socket.create_connection((self.upstream.hostname, self.upstream.port))
        _pipe_both(tls, back)
        tls.close()
        back.close()

    def close(self):
        self.sock.close()


@pytest.fixture
def tls_hub(lab_hub, tmp_path):
    """(https endpoint in front of the lab Hub, its CA file, another CA's file)."""
    pytest.importorskip("cryptography")
    ca_key, ca_cert = _make_ca("gpufleet lab CA")
    other_key, other_cert = _make_ca("some other CA")
    key, cert = _server_cert(ca_key, ca_cert)
    front = TLSFront(lab_hub.api, _pem(tmp_path / "server.pem", cert, key))
    yield front, _pem(tmp_path / "ca.pem", ca_cert), _pem(tmp_path / "other-ca.pem", other_cert)
    del other_key
    front.close()


def test_listing_goes_through_the_proxy_and_only_that_run(lab_hub, proxy, tmp_path):
    res = check_mode_run(lab_hub, tmp_path / "d", proxy=proxy.url)
    commit, dummy = lab_hub.files_at(TARGET, "main")
    assert res["commit"] == commit
    api_paths = [path for dummy, path in proxy.seen]
    assert any(path.startswith("/api/models/%s/revision/" % TARGET) for path in api_paths), api_paths
    assert any("/tree/" in path for path in api_paths), api_paths
    # every listing request the Hub saw came through the proxy
    hub_api = [e for e in lab_hub.log(server="api") if e["path"].startswith("/api/")]
    assert len(hub_api) == len([p for p in api_paths if p.startswith("/api/")])
    # the next run (no proxy) and huggingface_hub's own calls in this process do not inherit it
    before = len(proxy.seen)
    check_mode_run(lab_hub, tmp_path / "e")
    from huggingface_hub import HfApi

    HfApi(endpoint=lab_hub.api, token=False).model_info(TARGET)
    assert len(proxy.seen) == before


def test_listing_trusts_ca_path(tls_hub, lab_hub, tmp_path):
    front, ca, dummy = tls_hub
    res = check_mode_run(lab_hub, tmp_path / "d", endpoint=front.url, ca_path=ca)
    assert res["commit"] == lab_hub.files_at(TARGET, "main")[0]
    assert front.handshakes >= 1


def test_https_listing_tunnels_through_the_proxy_with_ca_path(tls_hub, lab_hub, proxy, tmp_path):
    front, ca, dummy = tls_hub
    res = check_mode_run(lab_hub, tmp_path / "d", endpoint=front.url, ca_path=ca, proxy=proxy.url)
    assert res["commit"] == lab_hub.files_at(TARGET, "main")[0]
    assert ("CONNECT", front.url.split("//", 1)[1]) in proxy.seen, proxy.seen


def test_listing_refuses_a_certificate_not_signed_by_ca_path(tls_hub, lab_hub, tmp_path):
    front, dummy, other = tls_hub
    with pytest.raises(_snapshot.SnapshotError) as err:
        check_mode_run(lab_hub, tmp_path / "d", endpoint=front.url, ca_path=other)
    assert "ca_path" in err.value.msg and "certificate" in err.value.msg.lower(), err.value.msg
    assert front.handshakes == 0
    # nor is the public CA store enough: the private CA must be named
    with pytest.raises(_snapshot.SnapshotError) as err:
        check_mode_run(lab_hub, tmp_path / "e", endpoint=front.url)
    assert "ca_path" in err.value.msg, err.value.msg


def test_a_refused_certificate_is_not_retried(tls_hub, lab_hub, tmp_path):
    """The same certificate is refused on every try: one connection, then the message, no backoff."""
    front, dummy, other = tls_hub
    with pytest.raises(_snapshot.SnapshotError) as err:
        check_mode_run(lab_hub, tmp_path / "d", endpoint=front.url, ca_path=other, max_tries=4, retry_wait=30)
    assert "ca_path" in err.value.msg, err.value.msg
    assert front.accepted == 1 and front.handshakes == 0


@contextlib.contextmanager
def silent_endpoint():
    """An endpoint that accepts connections and never says a word: (its URL, the connections it holds)."""
    server = socket.create_server(("127.0.0.1", 0))
    held = []
    release = threading.Event()

    def hold():
        while not release.is_set():
            try:
                conn, dummy = server.accept()
            except OSError:
                return
            held.append(conn)

    def hang_up():  # only a bound for broken code (no timeout applied), never what the test measures
        release.set()
        for conn in held:
            conn.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    bound = threading.Timer(300, hang_up)
    bound.start()
    try:
        yield "http://127.0.0.1:%d" % server.getsockname()[1], held
    finally:
        bound.cancel()
        hang_up()
        server.close()


def test_a_silent_endpoint_fails_the_listing_after_timeout(lab_hub, tmp_path):
    """huggingface_hub's listing calls take no per-call timeout: our client's must apply, or an
    endpoint (or proxy) that accepts and then says nothing blocks the run until the async job dies."""
    with silent_endpoint() as (url, held):
        with pytest.raises(_snapshot.SnapshotError) as err:
            check_mode_run(lab_hub, tmp_path / "d", endpoint=url, timeout=1)
        assert "timed out" in err.value.msg.lower() or "timeout" in err.value.msg.lower(), err.value.msg
        assert held, "the request never reached the silent endpoint"


def test_validate_certs_false_lists_without_the_ca(tls_hub, lab_hub, tmp_path):
    front, dummy, dummy2 = tls_hub
    res = check_mode_run(lab_hub, tmp_path / "d", endpoint=front.url, validate_certs=False)
    assert res["commit"] == lab_hub.files_at(TARGET, "main")[0]


def test_hub_http_config_repr_hides_the_proxy():
    config = _hub.HubHTTPConfig(proxy="http://user:s3cret@proxy:3128", validate_certs=True, ca_path=None)
    assert "s3cret" not in repr(config)


def test_https_to_a_plain_http_port_says_so_not_ca_path(lab_hub, tmp_path):
    with pytest.raises(_snapshot.SnapshotError) as err:
        check_mode_run(lab_hub, tmp_path / "d", endpoint=lab_hub.api.replace("http://", "https://"))
    assert "speak TLS" in err.value.msg and "set ca_path" not in err.value.msg, err.value.msg


# --- model_verify's repo_id listing takes the same options (issue 10 item 4) ------------------------------

def verify_against_hub(hub, path, **params):
    """model_verify of ``path`` (here an empty directory: what is asserted is the listing) in repo_id mode."""
    os.makedirs(str(path), exist_ok=True)
    base = dict(mode="quick", repo_id=TARGET, endpoint=hub.api, token=False, allow_patterns=["config.json"])
    base.update(params)
    _verify.check_params(**base)
    return _verify.verify(str(path), **base)


def listing_problems(res):
    return [p for p in res["problems"] if p.startswith("could not list")]


def test_verify_lists_through_the_proxy(lab_hub, proxy, tmp_path):
    res = verify_against_hub(lab_hub, tmp_path / "m", proxy=proxy.url)
    assert res["expected_from"] == "hub" and res["commit"] == lab_hub.files_at(TARGET, "main")[0], res["problems"]
    api_paths = [path for dummy, path in proxy.seen]
    assert any(path.startswith("/api/models/%s/revision/" % TARGET) for path in api_paths), api_paths
    assert any("/tree/" in path for path in api_paths), api_paths
    hub_api = [e for e in lab_hub.log(server="api") if e["path"].startswith("/api/")]
    assert len(hub_api) == len([p for p in api_paths if p.startswith("/api/")])
    # the files the listing named are what the tree is checked against: config.json is missing here
    assert any("config.json" in p for p in res["problems"]), res["problems"]


def test_verify_listing_trusts_ca_path_and_says_when_it_is_wrong(tls_hub, lab_hub, proxy, tmp_path):
    front, ca, other = tls_hub
    res = verify_against_hub(lab_hub, tmp_path / "m", endpoint=front.url, ca_path=ca)
    assert res["commit"] == lab_hub.files_at(TARGET, "main")[0] and not listing_problems(res), res["problems"]
    tunneled = verify_against_hub(lab_hub, tmp_path / "m", endpoint=front.url, ca_path=ca, proxy=proxy.url)
    assert tunneled["commit"] == res["commit"]
    assert ("CONNECT", front.url.split("//", 1)[1]) in proxy.seen, proxy.seen
    refused = verify_against_hub(lab_hub, tmp_path / "m", endpoint=front.url, ca_path=other)
    assert refused["commit"] is None and not refused["ok"]
    (line,) = listing_problems(refused)
    assert "ca_path" in line and "certificate" in line.lower(), line
    unchecked = verify_against_hub(lab_hub, tmp_path / "m", endpoint=front.url, validate_certs=False)
    assert unchecked["commit"] == res["commit"], unchecked["problems"]


def test_verify_listing_gives_up_on_a_silent_endpoint_after_timeout(lab_hub, tmp_path):
    with silent_endpoint() as (url, held):
        res = verify_against_hub(lab_hub, tmp_path / "m", endpoint=url, timeout=1)
        (line,) = listing_problems(res)
        assert "timed out" in line.lower() or "timeout" in line.lower(), line
        assert held, "the request never reached the silent endpoint"


def test_verify_listing_failure_never_shows_the_proxy_credentials(lab_hub, tmp_path):
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: the proxy connection is refused
    res = verify_against_hub(lab_hub, tmp_path / "m", proxy="http://gpu:s3cret-pw@127.0.0.1:%d" % port)
    (line,) = listing_problems(res)
    assert "s3cret-pw" not in repr(res), line


def test_verify_listing_error_that_quotes_secrets_is_masked(lab_hub, tmp_path, monkeypatch):
    """httpx does not quote the proxy in its errors today; whatever a library says, the problem line
    never shows the proxy's password, its URL or the host's token."""
    proxy_url = "http://gpu:s3cret-pw@127.0.0.1:3128"
    monkeypatch.setenv("HF_TOKEN", "hf_hostTOKENsecret0001")

    def blabbing(*args, **kwargs):
        raise OSError("via %s (password s3cret-pw) with Bearer hf_hostTOKENsecret0001" % proxy_url)

    monkeypatch.setattr(_hub, "resolve_commit", blabbing)
    os.makedirs(str(tmp_path / "m"))
    res = _verify.verify(str(tmp_path / "m"), mode="quick", repo_id=TARGET, endpoint=lab_hub.api,
                         allow_patterns=["config.json"], proxy=proxy_url)
    (line,) = listing_problems(res)
    assert "s3cret-pw" not in repr(res) and "hf_hostTOKENsecret0001" not in repr(res), line
    assert line.count(_secrets.MASK) >= 3, line
