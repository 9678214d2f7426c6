"""The bridge relay: bytes both ways to a loopback target, only for peers in the allowed range;
the /24 split that makes the `kubernetes` ClusterIP the bridge's own address; and the API
server's certificate naming that address."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json

import pytest
from cryptography import x509
from stepscope_dev import pki
from stepscope_dev.net import free_port
from stepscope_dev.realnode import network
from stepscope_dev.realnode.bridge_relay import Forward, Relay


def test_the_kubernetes_cluster_ip_is_the_bridge_address_and_no_pod_gets_a_service_ip():
    subnet = ipaddress.ip_network("10.213.9.0/24")
    services, pods = network.service_range(subnet), network.pod_range(subnet)
    # The API server gives the `kubernetes` Service the first address of its range.
    assert str(services[1]) == network.host_address(subnet)
    assert not services.overlaps(pods) and services.supernet() == subnet == pods.supernet()


def test_pods_get_addresses_only_outside_the_service_range(tmp_path):
    subnet = ipaddress.ip_network("10.213.9.0/24")
    path = network.write_cni_config(tmp_path / "net.d", tmp_path / "ipam", "ssnabc", subnet)
    (pod_range,) = json.loads(path.read_text())["plugins"][0]["ipam"]["ranges"][0]
    # The pods' route is the whole /24, so they reach the bridge address in the lower half.
    assert pod_range["subnet"] == str(subnet)
    first, last = (ipaddress.ip_address(pod_range[k]) for k in ("rangeStart", "rangeEnd"))
    assert first in network.pod_range(subnet) and last in network.pod_range(subnet)
    assert first not in network.service_range(subnet)


def test_the_api_server_certificate_names_the_bridge_address(tmp_path):
    keys = pki.create_pki(tmp_path / "pki", extra_server_ips=("10.213.9.1",))
    cert = x509.load_pem_x509_certificate(keys.serving_cert.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {
        "127.0.0.1",
        "10.213.9.1",
    }


def test_a_forward_only_targets_loopback():
    assert Forward.parse("10.213.9.1:443=127.0.0.1:6443") == Forward(
        "10.213.9.1", 443, "127.0.0.1", 6443
    )
    with pytest.raises(ValueError, match="loopback"):
        Forward.parse("10.213.9.1:443=10.0.0.5:6443")
    with pytest.raises(ValueError, match="LISTEN_HOST:PORT=TARGET_HOST:PORT"):
        Forward.parse("10.213.9.1:443")


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"echo:" + await reader.read())
    await writer.drain()
    writer.close()


async def _exchange(allowed: str, message: bytes) -> bytes:
    """Send ``message`` through a relay on 127.0.0.2 that serves only ``allowed``; the answer."""
    target_port, relay_port = free_port(), free_port()
    target = await asyncio.start_server(_echo, "127.0.0.1", target_port)
    relay = Relay(
        [Forward("127.0.0.2", relay_port, "127.0.0.1", target_port)],
        ipaddress.ip_network(allowed),
    )
    task = asyncio.create_task(relay.run())
    try:
        # Bounded by count: the relay task listens once the loop first runs it.
        for _ in range(500):
            with contextlib.suppress(OSError):
                reader, writer = await asyncio.open_connection("127.0.0.2", relay_port)
                break
            await asyncio.sleep(0.02)
        writer.write(message)
        writer.write_eof()
        try:
            answer = await asyncio.wait_for(reader.read(), 30)
        except ConnectionResetError:
            # A refused peer's connection is closed with its bytes unread: Linux resets it.
            answer = b""
        writer.close()
        return answer
    finally:
        task.cancel()
        target.close()


def test_the_relay_copies_both_ways_after_a_half_close():
    message = b"x" * 300_000
    assert asyncio.run(_exchange("127.0.0.0/8", message)) == b"echo:" + message


def test_the_relay_refuses_peers_outside_the_allowed_range():
    # The client connects from 127.0.0.1 (the source Linux picks for 127.0.0.0/8); the relay
    # serves only 10.213.9.0/24.
    assert asyncio.run(_exchange("10.213.9.0/24", b"hello")) == b""
