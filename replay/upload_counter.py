"""Caddy's answer to an upload: a loopback HTTP/1.1 backend that reads a PUT's or POST's body and answers with
the number of body bytes it read, in decimal (the replay protocol's upload answer, tparams.workloads), and the
parent of the server it serves:

    python -m replay.upload_counter -- caddy run --config Caddyfile

listens on a free port of 127.0.0.1 in its own namespace, starts the command with that port in
QREPLAY_COUNTER_PORT (the Caddyfile reverse-proxies uploads to ``127.0.0.1:{$QREPLAY_COUNTER_PORT}``), passes
SIGTERM on to it and exits with its status, so the runner stops the two as one server. Caddy 2.6 has no
directive that answers with a body's length; behind it, the h3 upload's flow control is still quic-go's,
which grants credit as caddy streams the body on to this backend (its socket buffers never fill here).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_ENV = "QREPLAY_COUNTER_PORT"
CHUNK = 1 << 16


class Counter(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_PUT(self) -> None:
        count = self._read_chunked() if "chunked" in self.headers.get("Transfer-Encoding", "") else \
            self._read(int(self.headers.get("Content-Length") or 0))
        answer = str(count).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_POST = do_PUT

    def _read(self, length: int) -> int:
        count = 0
        while count < length and (data := self.rfile.read(min(CHUNK, length - count))):
            count += len(data)
        return count

    def _read_chunked(self) -> int:
        count = 0
        while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
            count += self._read(size)
            self.rfile.readline()  # the CRLF after the chunk
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
            pass
        return count

    def log_message(self, format: str, *args) -> None:  # noqa: A002  (the server's own quiet)
        pass


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "--" or len(argv) < 2:
        print("usage: python -m replay.upload_counter -- COMMAND...", file=sys.stderr)
        return 2
    server = ThreadingHTTPServer(("127.0.0.1", 0), Counter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    child = subprocess.Popen(argv[1:], env={**os.environ, PORT_ENV: str(server.server_address[1])})
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    signal.signal(signal.SIGINT, lambda *_: child.terminate())
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
