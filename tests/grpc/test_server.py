"""The gRPC server process: the endpoint routes name, TLS, the settings that must go in pairs,
and ``python -m halfmoon.grpc`` serving until SIGTERM."""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from broker.grpc.server import GrpcServer, grpc_endpoint
from tests.grpc.conftest import metadata

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 30


def test_the_endpoint_is_the_setting_else_the_address(settings):
    settings.HALFMOON_GRPC_ENDPOINT = ""
    assert grpc_endpoint("127.0.0.1", 8081) == "127.0.0.1:8081"
    assert grpc_endpoint("::1", 8081) == "[::1]:8081"
    assert grpc_endpoint("0.0.0.0", 9000) == f"{socket.gethostname()}:9000"
    assert grpc_endpoint("::", 9000) == f"{socket.gethostname()}:9000"
    settings.HALFMOON_GRPC_ENDPOINT = "mq.example.com:443"
    assert grpc_endpoint("0.0.0.0", 9000) == "mq.example.com:443"


def self_signed(tmp_path: Path) -> tuple[Path, Path, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(pem)
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file, pem


@pytest.mark.django_db(transaction=True)
def test_tls_when_a_certificate_and_key_are_set(settings, tmp_path):
    cert_file, key_file, pem = self_signed(tmp_path)
    settings.HALFMOON_GRPC_TLS_CERT_FILE = str(cert_file)
    settings.HALFMOON_GRPC_TLS_KEY_FILE = str(key_file)
    settings.HALFMOON_GRPC_ALLOW_ANONYMOUS = True
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = GrpcServer("127.0.0.1", 0, threads=2)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(DEADLINE_S)
    try:
        assert server.tls
        credentials = grpc.ssl_channel_credentials(root_certificates=pem)
        options = [("grpc.ssl_target_name_override", "localhost")]
        with grpc.secure_channel(f"127.0.0.1:{server.port}", credentials, options) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            answer = stub.QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name="nope")),
                metadata=metadata(),
                timeout=10,
            )
            assert answer.status.code == pb.Code.TOPIC_NOT_FOUND
        with (
            grpc.insecure_channel(f"127.0.0.1:{server.port}") as plain,
            pytest.raises(grpc.RpcError),
        ):
            service_pb2_grpc.MessagingServiceStub(plain).QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name="nope")), timeout=3
            )
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(grace_s=0.5), loop).result(DEADLINE_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(DEADLINE_S)


def test_a_certificate_without_its_key_does_not_start(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "halfmoon.settings_test",
        "HALFMOON_GRPC_TLS_CERT_FILE": str(tmp_path / "cert.pem"),
    }
    env.pop("HALFMOON_GRPC_TLS_KEY_FILE", None)
    done = subprocess.run(
        [sys.executable, "-m", "halfmoon.grpc", "--port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode != 0
    assert "HALFMOON_GRPC_TLS_KEY_FILE" in done.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_process_serves_until_sigterm():
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "halfmoon.settings_test",
        "HALFMOON_GRPC_ALLOW_ANONYMOUS": "false",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "halfmoon.grpc", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=DEADLINE_S)
            answer = service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name="orders")),
                metadata=metadata(),
                timeout=10,
            )
        assert answer.status.code == pb.Code.UNAUTHORIZED  # anonymous, refused: it answers
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(DEADLINE_S) == 0
        assert time.monotonic() - started < 10
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert f"127.0.0.1:{port} (plaintext)" in process.stdout.read()
