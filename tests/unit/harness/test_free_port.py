"""Listening ports are picked below the kernel's ephemeral range, where no client's connect()
can take them between the pick and the server's bind, and a taken port is never handed out."""

from __future__ import annotations

import socket

import pytest
from stepscope_dev import net


def test_ports_come_from_below_the_ephemeral_range():
    low = int(net.EPHEMERAL_RANGE.read_text().split()[0])
    ports = [net.free_port() for _ in range(50)]
    assert all(net.LOWEST_PORT <= port < low for port in ports), ports
    # Random picks: fifty in a range of thousands are not one port over and over.
    assert len(set(ports)) > 40, ports


def test_a_port_something_holds_is_skipped(monkeypatch):
    ports = net.listening_ports()
    held, other = net.free_port(), net.free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", held))
        holder.listen()
        picks = iter([ports.index(held), ports.index(other)])
        monkeypatch.setattr(net.secrets, "randbelow", lambda n: next(picks))
        assert net.free_port() == other


def test_no_free_port_is_an_error_naming_the_range(monkeypatch):
    monkeypatch.setattr(net, "_free", lambda port: False)
    with pytest.raises(RuntimeError, match=r"no free TCP port in 10000-\d+ after 200 random"):
        net.free_port()
