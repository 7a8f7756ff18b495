"""Re-make the committed captures (both installed browsers, ngtcp2's and aioquic's
clients, ngtcp2's client speaking QUIC draft-29) and the browsers' set files in datasets/sets.

    .venv/bin/python datasets/captures/make_captures.py [OUTDIR]
    .venv/bin/python datasets/captures/make_captures.py --library gtlsclient-draft29 [OUTDIR]

Every capture is of loopback traffic to a throw-away lab server (gtlsserver);
the key logs belong to those throw-away sessions and are committed so that
tests can exercise ``qscan pcap --keylog``. Update PROVENANCE.md after a run.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scanner.browser import LAB_HOST, LOOPBACK, capture_browser, lab_capture
from scanner.capture.results import browser_set_document

SETS_DIR = Path(__file__).resolve().parent.parent / "sets"


def aioquic_client(port: int) -> None:
    """One HTTP/3 handshake attempt with aioquic's default client parameters."""
    from aioquic.asyncio import connect
    from aioquic.quic.configuration import QuicConfiguration

    async def attempt() -> None:
        configuration = QuicConfiguration(is_client=True, alpn_protocols=["h3"], server_name=LAB_HOST)
        configuration.verify_mode = ssl.CERT_NONE
        async with connect(LOOPBACK, port, configuration=configuration, wait_connected=True):
            pass

    asyncio.run(asyncio.wait_for(attempt(), 5))


def capture_library_client(name: str, workdir: Path) -> Path:
    """The capture of one library client's run (its key log, when it wrote one, beside it)."""
    with lab_capture(workdir, name) as lab:
        if name.startswith("gtlsclient"):
            url = f"https://{LAB_HOST}:{lab.port}/"
            # ngtcp2 0.12 still speaks draft-29 to -32 (gtlsserver answers in the client's version).
            version = ["-v", "0xff00001d"] if name == "gtlsclient-draft29" else []
            command = ["gtlsclient", "-q", *version, "--exit-on-all-streams-close", "--timeout=3s", LOOPBACK, str(lab.port), url]
        else:
            command = [sys.executable, __file__, "--aioquic-client", str(lab.port)]
        # GnuTLS honours SSLKEYLOGFILE: the draft capture's key log opens the server's side too.
        env = {**os.environ, "SSLKEYLOGFILE": str(lab.keylog_file)} if name == "gtlsclient-draft29" else None
        client = lab.start(command, workdir / f"{name}-client.log", env)
        try:
            client.wait(15)
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.5)
    return lab.capture_file


def main(outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    made = []
    with tempfile.TemporaryDirectory(prefix="qscan-captures-") as scratch:
        for browser in ("chromium", "firefox"):
            capture = capture_browser(browser, Path(scratch) / browser)
            for source, suffix in ((capture.capture_file, ".pcapng"), (capture.keylog_file, ".keys")):
                shutil.copy(source, outdir / f"{capture.label}{suffix}")
            made.append(outdir / f"{capture.label}.pcapng")
            document = browser_set_document(capture)
            document["provenance"]["capture_file"] = f"datasets/captures/{capture.label}.pcapng"
            (SETS_DIR / f"{capture.label}.json").write_text(json.dumps(document, indent=2) + "\n")
            print(capture.label, capture.version_line, capture.captured_at, " ".join(capture.command))
        for name in ("gtlsclient", "aioquic"):
            shutil.copy(capture_library_client(name, Path(scratch)), outdir / f"{name}.pcapng")
            made.append(outdir / f"{name}.pcapng")
    subprocess.run(["mergecap", "-w", str(outdir / "mixed-clients.pcapng"), *map(str, made)], check=True)
    print("wrote", ", ".join(p.name for p in made), "and mixed-clients.pcapng to", outdir)
    library_capture("gtlsclient-draft29", outdir)  # kept out of the mix: its ClientHello is a vector of its own


def library_capture(name: str, outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="qscan-captures-") as scratch:
        capture = capture_library_client(name, Path(scratch))
        shutil.copy(capture, outdir / f"{name}.pcapng")
        if capture.with_suffix(".keys").exists():
            shutil.copy(capture.with_suffix(".keys"), outdir / f"{name}.keys")
    print("wrote", outdir / f"{name}.pcapng")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--aioquic-client"]:
        try:
            aioquic_client(int(sys.argv[2]))
        except Exception as exc:  # the ClientHello is out; how the handshake ends does not matter here
            print(f"aioquic client: {exc!r}", file=sys.stderr)
    elif sys.argv[1:2] == ["--library"]:
        library_capture(sys.argv[2], Path(sys.argv[3]) if len(sys.argv) > 3 else Path(__file__).parent)
    else:
        main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
