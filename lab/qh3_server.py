"""A small qh3 HTTP/3 server for the lab: answers every request with 200 and a short body.

qh3 is aioquic's fork with a Rust core; it keeps aioquic's API, so the
protocol and the command line are lab.aioquic_server's. Run inside a lab namespace by the "qh3" kind:
    python -m lab.qh3_server IP:443 --cert=C --key=K [--initial-max-data=N ...]
qh3 has one window for all streams: the largest of the three given is used.
"""

from __future__ import annotations

from lab.aioquic_server import serve_main


def main() -> None:
    serve_main("qh3")


if __name__ == "__main__":
    main()
