"""`make demo` run again at once: the port its last run left in TIME_WAIT is free to the local
host (which binds with SO_REUSEADDR), and only a listener makes it busy."""

from __future__ import annotations

import socket

from localrun.demo import _port_free


def test_a_port_left_in_time_wait_is_free_and_a_listened_one_is_not() -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    assert not _port_free(port)  # listened on
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server's side closes first: its end waits in TIME_WAIT
    client.recv(1)
    client.close()
    server.close()
    with socket.socket() as plain:  # what the check did before: this port looks taken
        try:
            plain.bind(("127.0.0.1", port))
            waited = False
        except OSError:
            waited = True
    assert waited, "no TIME_WAIT was left to test against"
    assert _port_free(port)
