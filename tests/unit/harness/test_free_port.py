"""Listening ports are picked below the kernel's ephemeral range, where no client's connect()
can take them between the pick and the server's bind, a taken port is never handed out, and a
port one pick handed out is not handed to another pick until its claim has run out."""

from __future__ import annotations

import socket

import pytest
from stepscope_dev import net


@pytest.fixture(autouse=True)
def claims(tmp_path, monkeypatch):
    """Each test's picks claim in a folder of its own, apart from every other pick here."""
    monkeypatch.setattr(net, "CLAIMS_DIR", tmp_path / "claims")


def _unclaimed_free_ports(count: int) -> list[int]:
    ports = net.listening_ports()
    return [port for port in ports[1000:2000] if net._free(port)][:count]


def _always_pick(monkeypatch, *ports: int) -> None:
    """secrets.randbelow returns the index of each port in turn, the last one for ever."""
    indexes = [net.listening_ports().index(port) for port in ports]
    monkeypatch.setattr(
        net.secrets, "randbelow", lambda n: indexes.pop(0) if len(indexes) > 1 else indexes[0]
    )


def test_ports_come_from_below_the_ephemeral_range():
    low = int(net.EPHEMERAL_RANGE.read_text().split()[0])
    ports = [net.free_port() for _ in range(50)]
    assert all(net.LOWEST_PORT <= port < low for port in ports), ports
    # Claimed: fifty picks are fifty ports.
    assert len(set(ports)) == 50, ports


def test_a_port_something_holds_is_skipped(monkeypatch):
    held, other = _unclaimed_free_ports(2)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", held))
        holder.listen()
        _always_pick(monkeypatch, held, other)
        assert net.free_port() == other


def test_a_picked_port_is_not_picked_again_until_its_claim_runs_out(monkeypatch):
    first, second = _unclaimed_free_ports(2)
    now = [1_000_000.0 * net.CLAIM_SECONDS + 5]
    monkeypatch.setattr(net.time, "time", lambda: now[0])
    _always_pick(monkeypatch, first, first, second)
    assert net.free_port() == first
    # Free, since its server has not bound it yet, but claimed: the next pick moves on.
    assert net.free_port() == second
    # In the next time slot the claim still holds (at least CLAIM_SECONDS in all) ...
    now[0] += net.CLAIM_SECONDS
    _always_pick(monkeypatch, first, second)
    with pytest.raises(RuntimeError, match="no free TCP port"):
        net.free_port()
    # ... and two slots on it has run out and is cleared away.
    now[0] += net.CLAIM_SECONDS
    _always_pick(monkeypatch, first)
    assert net.free_port() == first
    assert sorted(p.name for p in net.CLAIMS_DIR.iterdir()) == [
        f"{int(now[0] // net.CLAIM_SECONDS)}-{first}"
    ]


def test_no_free_port_is_an_error_naming_the_range(monkeypatch):
    monkeypatch.setattr(net, "_free", lambda port: False)
    with pytest.raises(RuntimeError, match=r"no free TCP port in 10000-\d+ after 200 random"):
        net.free_port()
