"""The test helper that picks a port for a server a test starts (tests/conftest.py free_port)."""

from __future__ import annotations

import socket

from tests.conftest import CHOSEN_PORTS, bindable, ephemeral_low, free_port


def test_ports_are_outside_the_kernels_ephemeral_range_distinct_and_free() -> None:
    # A port of the ephemeral range can be taken between the choice and the server's bind by any socket bound to
    # port 0 or any outgoing connection's source port (bench.perf's `python server.py` exited 2 once that way).
    low = ephemeral_low()
    assert low > CHOSEN_PORTS[0]  # this machine leaves room below the range (Linux's default: 32768)
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(CHOSEN_PORTS[0] <= port < low for port in ports)
    for port in ports[:5]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # nothing holds it


def test_a_port_something_holds_is_not_bindable() -> None:
    port = free_port()
    assert bindable(port)
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        assert not bindable(port)
