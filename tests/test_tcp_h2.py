"""replay/tcp/h2, the replay protocol over kernel TCP, TLS 1.3 and HTTP/2: its client against its server on
loopback for every kind of request, Debian's curl downloading from its server, and what TCP has no counterpart
of refused in one line."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time

import pytest

from common.certs import write_signed_certificate
from replay.stacks.base import GO_BIN_DIR

H2 = GO_BIN_DIR / "h2"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not H2.is_file():
        pytest.skip(f"{H2} is not built: run scripts/setup.sh (needs Go)")
    workdir = tmp_path_factory.mktemp("h2")
    write_signed_certificate(workdir / "cert.pem", workdir / "key.pem", workdir / "ca.pem", ["localhost"], [])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = "127.0.0.1:%d" % probe.getsockname()[1]
    process = subprocess.Popen([H2, "server", address, f"--cert={workdir / 'cert.pem'}",
                                f"--key={workdir / 'key.pem'}", "--cc=cubic"], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60  # the server starts at SCHED_IDLE, on a loaded machine seconds later
    while True:
        try:
            socket.create_connection(("127.0.0.1", int(address.split(":")[1]))).close()
            break
        except ConnectionRefusedError:
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1]
            time.sleep(0.05)
    yield address
    process.terminate()
    stderr = process.communicate(timeout=10)[1]
    assert process.returncode == 0, stderr


def client(address: str, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([H2, "client", address, *options], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("options", "size", "requests"), [
    (["--size=3000000"], 3_000_000, 1),
    (["--size=3000000", "--direction=up"], 3_000_000, 1),
    (["--size=1000", "--requests=50", "--concurrency=8"], 1000, 50),
])
def test_client_and_server_speak_the_replay_protocol(server, options, size, requests):
    started = time.monotonic()
    done = client(server, "--cc=cubic", *options)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["bytes"] == size * requests and result["requests"] == len(result["latencies_s"]) == requests
    assert 0 < result["handshake_s"] and 0 < result["ttfb_s"] <= max(result["latencies_s"]) <= result["duration_s"]
    # Seconds, within the client's life (not fixed bounds: at SCHED_IDLE on a loaded machine the handshake alone
    # can take more than one): the handshake comes before the first request, where the duration starts
    assert result["handshake_s"] + result["duration_s"] < elapsed, (result, elapsed)


def test_curl_downloads_over_h2(server):
    if not shutil.which("curl"):
        pytest.skip("no curl")
    done = subprocess.run(["curl", "-sS", "--http2", "-k", f"https://{server}/1000000", "-o", "/dev/null",
                           "-w", "%{http_version} %{size_download}"], capture_output=True, text=True, timeout=60)
    assert done.stdout == "2 1000000", done.stderr


@pytest.mark.parametrize("option", ["--initial-max-data=5", "--disable-active-migration", "--gso=true",
                                    "--cipher=TLS_AES_128_GCM_SHA256", "--qlog-dir=/tmp", "--cc=reno"])
def test_what_tcp_has_no_counterpart_of_is_refused_in_one_line(server, option):
    done = client(server, "--size=1000", option)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and option[2:].split("=")[0] in done.stderr
    assert done.stdout == ""
