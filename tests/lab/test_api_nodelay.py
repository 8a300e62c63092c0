"""The lab API server's connections send without Nagle's algorithm, as kube-apiserver's do
(Go's net package sets TCP_NODELAY on every TCP connection, accepted ones included).

asyncio turns Nagle off on a connection only when its socket is IPPROTO_TCP
(base_events._set_nodelay), and an accepted socket takes the listening socket's proto: the
lab's listening socket, made by hand with proto 0, left it on. A response written as
headers then body then waited for the client's delayed ACK, ~40 ms per request on every
kept-alive connection (kubectl apply -k of deploy/controller took 2 s instead of 0.2 s).
"""

from __future__ import annotations

import socket
import ssl

import httpx

from drainsafe.lab.controlplane import ControlPlane


async def test_every_accepted_connection_has_nagle_off(control_plane: ControlPlane) -> None:
    cp = control_plane
    async with httpx.AsyncClient(
            base_url=cp.url, verify=ssl.create_default_context(cafile=cp.ca_path),
            headers={"Authorization": f"Bearer {cp.token}"}, timeout=10) as client:
        for _ in range(2):  # the second on the kept-alive connection
            assert (await client.get("/api/v1/namespaces/default")).status_code == 200
        server = cp._server
        assert server is not None
        connections = list(server.server_state.connections)
        assert connections
        for connection in connections:
            sock = connection.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
