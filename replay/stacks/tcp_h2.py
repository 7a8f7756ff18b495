"""Go's net/http as the TCP reference of every workload: HTTP/2 on TLS 1.3 over kernel TCP, our own client and
server of the replay protocol (replay/tcp/h2), so that an upload, a request-response run and many clients can
be measured over TCP beside QUIC, through the same link (curl against caddy downloads only: caddy takes no
upload, and curl 7.88 cannot time a request-response run).

The kernel is the transport: --cc sets each socket's TCP congestion control (TCP_CONGESTION; the namespaces
may choose cubic and bbr, scripts/setup.sh), the receive window grows by the kernel's own rule whatever
--autotune says, and there are no transport parameters to set but the server's initial_max_streams_bidi: HTTP/2's
SETTINGS_MAX_CONCURRENT_STREAMS, the streams a client may have open at once (Go's default 250), as a QUIC server
raising its credit as streams close (quic-go) holds them. HTTP/2's own windows are 16 MiB a stream and
24 MiB the connection, quic-go's --autotune ceilings, so that TCP's window, not HTTP/2's, is the limit.
"""

from __future__ import annotations

from replay.stacks.base import ClientResult, ReplayProgram


class TcpH2(ReplayProgram):
    name = "tcp-h2"
    protocol = "h2"
    replay_protocol = frozenset({"down", "up", "many"})
    settable = {"client": frozenset(), "server": frozenset({"initial_max_streams_bidi"})}
    own_parameters = True
    no_set_reason = "tcp-h2 speaks TCP: it has no QUIC transport parameters to set"

    def autotunes(self, requested: bool, protocol: str | None = None) -> bool:
        return True  # the kernel grows a TCP receive window whatever qreplay asks (tcp_moderate_rcvbuf)

    def capabilities(self) -> str:
        return ("HTTP/2 on TLS 1.3 over kernel TCP (Go's net/http): no transport parameters but the server's "
                "initial_max_streams_bidi (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS); --cc sets each socket's TCP "
                "congestion control")

    def complete_row(self, row: dict, result: ClientResult) -> None:
        row["handshake_s"] = result.extra.get("handshake_s")
        row["protocol_seen"] = "h2"


STACK = TcpH2()
