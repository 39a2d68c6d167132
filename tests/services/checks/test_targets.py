"""Back-check targets under control: the check-target rule applied when a
``check_url`` is set (``broker.services.topology.writes.check_url_validate``) and again, after DNS
resolution, when a check is sent (``broker.plumbing.pinned_transport.PinnedTransport``): a
refused target is an UNDELIVERED check with its reason in the timeline; an allowed name is
reached at the address that was judged, with its Host header and TLS server name."""

from __future__ import annotations

import asyncio
import datetime
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from broker.errors import InvalidInput
from broker.models import ProducerGroup, TransactionEvent
from broker.plumbing.pinned_transport import CheckTargetRefused, PinnedTransport
from broker.rules.check_targets import allowed_targets_parse
from broker.selectors.timeline import transaction_timeline
from broker.services.topology.writes import producer_group_create, producer_group_update
from tests.services.checks.helpers import journal, refreshed, url_group
from tests.support import answer_state, due_at, prepare, round_for

# --- When the URL is set ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://169.254.169.254/latest/meta-data/", "link_local"),
        ("http://[fe80::1]/check", "link_local"),
        ("http://224.0.0.1/check", "multicast"),
        ("ftp://127.0.0.1/check", "scheme"),
        ("http://8.8.8.8/check", "not_allowed"),
        ("http://0.0.0.0:9000/check", "unspecified"),
        ("http://unlisted.invalid/check", "unresolved"),
    ],
)
def test_create_and_update_refuse_a_bad_check_url(db, url, rule):
    with pytest.raises(InvalidInput) as refused:
        producer_group_create(name="G", check_url=url)
    assert (refused.value.code, refused.value.details["rule"]) == ("check_url_not_allowed", rule)
    assert not ProducerGroup.objects.exists()

    producer_group_create(name="G", check_url="http://127.0.0.1:9000/check")
    with pytest.raises(InvalidInput) as refused:
        producer_group_update(name="G", check_url=url)
    assert refused.value.details == {"field": "check_url", "check_url": url, "rule": rule}
    assert ProducerGroup.objects.get(name="G").check_url == "http://127.0.0.1:9000/check"


def test_a_name_is_resolved_when_set_unless_listed(db, settings):
    # localhost resolves into the default networks (127.0.0.0/8).
    producer_group_create(name="A", check_url="http://localhost:9000/check")
    # A listed name is accepted before it resolves.
    settings.HALFMOON_CHECK_URL_ALLOWED_NETWORKS = ["10.0.0.0/8", "producer.invalid"]
    producer_group_create(name="B", check_url="https://producer.invalid/check")
    # Not listed, and it resolves outside the networks now: refused.
    with pytest.raises(InvalidInput) as refused:
        producer_group_create(name="C", check_url="http://localhost:9000/check")
    assert refused.value.details["rule"] == "not_allowed"
    assert "localhost (127.0.0.1) is outside the networks" in refused.value.message


def test_the_broker_itself_is_its_host_and_port(db, settings):
    settings.HALFMOON_HOST, settings.HALFMOON_PORT = "127.0.0.1", 8123
    with pytest.raises(InvalidInput) as refused:
        producer_group_create(name="G", check_url="http://localhost:8123/api/v1/topics")
    assert refused.value.details["rule"] == "broker_itself"
    producer_group_create(name="G", check_url="http://127.0.0.1:8000/check")  # another port

    # Served on every address: any loopback address on its port is the broker.
    settings.HALFMOON_HOST = "0.0.0.0"
    with pytest.raises(InvalidInput):
        producer_group_create(name="H", check_url="http://127.0.0.2:8123/check")


# --- When a check is sent ----------------------------------------------------------------------


def test_a_name_that_resolves_to_a_refused_address_at_send_time_is_undelivered(
    topic, one_queue, check_server, settings
):
    """DNS rebinding: ``localhost`` is allowed by name when the URL is set; when the check is
    sent it resolves to 127.0.0.1, which the networks no longer include: nothing is sent, the
    check is UNDELIVERED with the rule in the journal and the timeline."""
    settings.HALFMOON_CHECK_URL_ALLOWED_NETWORKS = ["localhost", "10.0.0.0/8"]
    url = check_server.url.replace("127.0.0.1", "localhost")
    url_group("G", url, check_server)
    tx = prepare()

    round_for(tx, due_at(tx))

    assert check_server.received() == []
    tx = refreshed(tx)
    assert (tx.state, tx.check_times, tx.undelivered_checks) == ("PREPARED", 0, 1)
    [event] = journal(TransactionEvent.Kind.CHECK_UNDELIVERED)
    assert event.outcome == "UNDELIVERED"
    assert event.detail["target_refused"] == "not_allowed"
    assert event.detail["error"] == (
        "CheckTargetRefused: localhost (127.0.0.1) is outside the networks a check may reach "
        "(HALFMOON_CHECK_URL_ALLOWED_NETWORKS)."
    )
    [entry] = [e for e in transaction_timeline(tx.transaction_id) if e.kind == "check_undelivered"]
    assert "localhost (127.0.0.1) is outside the networks a check may reach" in entry.title
    group = ProducerGroup.objects.get(name="G")
    assert group.unreachable_since is not None
    assert "outside the networks" in group.last_check_error


def test_a_stored_url_refused_by_the_rule_now_is_never_connected_to(
    topic, one_queue, check_server, settings
):
    """A URL stored before the rule (or before the setting changed) is judged again at send."""
    url_group("G", check_server.url, check_server)
    ProducerGroup.objects.filter(name="G").update(check_url="http://169.254.169.254/latest")
    tx = prepare()

    outcome = round_for(tx, due_at(tx))["outcomes"][0]

    assert (outcome.delivered, outcome.refused) == (False, "link_local")
    [event] = journal(TransactionEvent.Kind.CHECK_UNDELIVERED)
    assert event.detail["target_refused"] == "link_local"
    assert refreshed(tx).check_times == 0


def test_an_allowed_name_is_reached_at_its_judged_address_with_its_host_header(
    topic, one_queue, check_server
):
    check_server.answer = answer_state("COMMIT_MESSAGE")
    url = check_server.url.replace("127.0.0.1", "localhost")
    url_group("G", url, check_server)
    tx = prepare()

    round_for(tx, due_at(tx))

    [request] = check_server.received()
    assert request.headers["Host"] == url.removeprefix("http://").removesuffix("/check")
    assert request.signature_valid
    assert refreshed(tx).state == "COMMITTED"


# --- TLS: the certificate is verified against the name, not the pinned address ----------------


def _certificate_for(name: str) -> tuple[bytes, bytes]:
    """A self-signed certificate (PEM) for the DNS name ``name`` only, and its key (PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@pytest.fixture
def tls_server(tmp_path):
    """An HTTPS server on 127.0.0.1 whose certificate names ``localhost`` only; yields its
    port, the client's SSL context trusting it, and the server names clients sent (SNI) and
    the Host headers they sent."""
    cert_pem, key_pem = _certificate_for("localhost")
    (tmp_path / "cert.pem").write_bytes(cert_pem)
    (tmp_path / "key.pem").write_bytes(key_pem)
    seen: dict[str, list[str | None]] = {"sni": [], "host": []}
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server_context.sni_callback = lambda sock, name, ctx: seen["sni"].append(name)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen["host"].append(self.headers.get("Host"))
            data = b'{"state": "COMMIT_MESSAGE"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = server_context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    client_context = ssl.create_default_context(cadata=cert_pem.decode())
    try:
        yield httpd.server_address[1], client_context, seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def _post(url: str, transport: PinnedTransport) -> httpx.Response:
    async def send() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, timeout=5, trust_env=False) as client:
            return await client.post(url, content=b"{}")

    return asyncio.run(send())


def test_https_keeps_the_tls_server_name_and_verifies_the_certificate_against_it(tls_server):
    port, context, seen = tls_server
    transport = PinnedTransport(
        allowed=allowed_targets_parse("127.0.0.0/8,::1/128"),
        broker=None,
        resolve_timeout_s=5,
        verify=context,
    )

    response = _post(f"https://localhost:{port}/check", transport)

    assert response.json() == {"state": "COMMIT_MESSAGE"}
    assert seen["sni"] == ["localhost"]
    assert seen["host"] == [f"localhost:{port}"]
    # The same server by address: the certificate does not name 127.0.0.1, so it is refused.
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED|IP address mismatch"):
        _post(f"https://127.0.0.1:{port}/check", transport)


def test_the_transport_refuses_before_connecting(tls_server):
    port, context, seen = tls_server
    transport = PinnedTransport(
        allowed=allowed_targets_parse("10.0.0.0/8,localhost"),
        broker=None,
        resolve_timeout_s=5,
        verify=context,
    )

    with pytest.raises(CheckTargetRefused) as refused:
        _post(f"https://localhost:{port}/check", transport)

    assert refused.value.refusal.rule == "not_allowed"
    assert "localhost (127.0.0.1)" in str(refused.value)  # judged after resolving
    assert seen == {"sni": [], "host": []}  # never connected
