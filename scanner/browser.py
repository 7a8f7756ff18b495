"""The installed browsers as QUIC clients: launch, capture, extract.

A browser is started headless in a fresh profile, forced onto HTTP/3 against
a QUIC server on loopback (ngtcp2's gtlsserver with a throw-away certificate)
while dumpcap captures that port. Only the ClientHello matters, so a refused
certificate is fine. The browser's key log comes along, which also yields
the lab server's EncryptedExtensions. Browser, dumpcap and server run in their
own process groups and are always ended, also on Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from common.tshark import dumpcap_path, wait_until_capturing
from common.process import Starter, process_groups
from common.netns import teardown_on_signals
from tparams.errors import ToolError

if TYPE_CHECKING:  # the capture's decoder (aioquic's crypto, pyshark) is imported where a capture is read
    from scanner.capture.extract import CaptureResult

LAB_HOST = "lab.test"
LOOPBACK = "127.0.0.1"
BROWSERS = ("chromium", "firefox")
_EXECUTABLES = {"chromium": "chromium", "firefox": "firefox-esr"}
SERVER_EXECUTABLE = "gtlsserver"  # Debian package ngtcp2-server


@dataclass(frozen=True)
class BrowserCapture:
    browser: str  # "chromium" or "firefox-esr": the executable that ran
    version: str  # exact, as the browser prints it, e.g. "156.0.8078.79"
    version_line: str
    command: list[str]
    captured_at: str  # UTC, ISO 8601
    capture_file: Path
    keylog_file: Path
    result: CaptureResult

    @property
    def label(self) -> str:
        return f"{self.browser}-{self.version}"


def browser_version(browser: str) -> tuple[str, str]:
    """(exact version, the line the browser printed) of the installed browser."""
    executable = _executable(browser)
    try:
        output = subprocess.run(
            [executable, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except subprocess.TimeoutExpired as exc:
        raise ToolError(f"{executable} --version did not answer within 30 s") from exc
    line = next((line.strip() for line in output.splitlines() if re.search(r"\d+\.\d+", line)), "")
    match = re.search(r"(\d+(?:\.\d+)+[a-z]*)", line)
    if not match:
        raise ToolError(f"cannot read the version of {executable} from {output.strip()!r}")
    return match.group(1), line


def capture_browser(
    browser: str,
    workdir: Path | None = None,
    timeout: float = 40.0,
    progress: Callable[[str], None] = lambda _: None,
) -> BrowserCapture:
    """Run ``browser`` against a lab server on loopback and extract every ClientHello it sent.

    The capture and key log stay in ``workdir`` (a fresh temporary directory
    when not given, which the caller may delete).
    """
    from scanner.capture.extract import read_capture
    executable = _executable(browser)
    version, version_line = browser_version(browser)
    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"qscan-{browser}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    captured_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with lab_capture(workdir, _EXECUTABLES[browser]) as lab:
        command = _browser_command(browser, executable, workdir, lab.port)
        progress(f"{executable} {version} against {LAB_HOST}:{lab.port}")
        environment = {**os.environ, "SSLKEYLOGFILE": str(lab.keylog_file), "MOZ_HEADLESS": "1"}
        browser_process = lab.start(command, workdir / "browser.log", environment)
        _wait_for_hello(browser_process, lab.capture_file, lab.port, timeout)
        # Let retransmissions and retries on other ports land in the capture too.
        time.sleep(1.0)
    result = read_capture(
        lab.capture_file,
        lab.keylog_file if _has_secrets(lab.keylog_file) else None,
        client=f"{_EXECUTABLES[browser]} {version}",
        ports=(lab.port,),
    )
    return BrowserCapture(
        _EXECUTABLES[browser], version, version_line, command, captured_at, lab.capture_file, lab.keylog_file, result
    )


@dataclass(frozen=True)
class LabCapture:
    """A QUIC server on loopback with dumpcap capturing its port; ``start`` runs a client beside them."""

    port: int
    capture_file: Path
    keylog_file: Path  # where clients that honour SSLKEYLOGFILE should write
    start: Starter  # start(command, log_file, env=None) -> Popen, ended with the lab


@contextlib.contextmanager
def lab_capture(workdir: Path, name: str) -> Iterator[LabCapture]:
    """Server and capture for clients of any kind; on exit everything is ended and the
    capture file is complete."""
    capture_file, keylog_file = workdir / f"{name}.pcapng", workdir / f"{name}.keys"
    for stale in (capture_file, keylog_file):
        stale.unlink(missing_ok=True)
    if shutil.which(SERVER_EXECUTABLE) is None:
        raise ToolError(f"{SERVER_EXECUTABLE} is not installed (Debian package ngtcp2-server)")
    port = _free_udp_port()
    key_file, cert_file = workdir / "server.key", workdir / "server.crt"
    from common.certs import write_certificate  # cryptography: where a capture runs, not at every qscan's start

    write_certificate(cert_file, key_file, [LAB_HOST], [])
    # SIGTERM is turned into an exception meanwhile, so that a killed qscan still ends the groups
    # instead of leaving a browser behind.
    with teardown_on_signals(), process_groups() as start:
        start([SERVER_EXECUTABLE, "-q", LOOPBACK, str(port), str(key_file), str(cert_file)], workdir / f"{name}-server.log")
        _start_capture(start, port, capture_file, workdir / f"{name}-dumpcap.log")
        yield LabCapture(port, capture_file, keylog_file, start)


def _executable(browser: str) -> str:
    if browser not in _EXECUTABLES:
        raise ToolError(f"unknown browser {browser!r} (choose one of {', '.join(BROWSERS)})")
    executable = _EXECUTABLES[browser]
    if shutil.which(executable) is None:
        raise ToolError(f"{executable} is not installed (Debian package {executable})")
    return executable


def _browser_command(browser: str, executable: str, workdir: Path, port: int) -> list[str]:
    url = f"https://{LAB_HOST}:{port}/"
    profile = workdir / "profile"
    shutil.rmtree(profile, ignore_errors=True)
    profile.mkdir()
    if browser == "chromium":
        return [
            executable,
            "--headless",
            "--no-sandbox",  # we run as root in the lab
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--enable-quic",
            f"--origin-to-force-quic-on={LAB_HOST}:{port}",
            f"--host-resolver-rules=MAP {LAB_HOST} {LOOPBACK}",
            "--ignore-certificate-errors",
            "--dump-dom",
            url,
        ]
    preferences = {
        "network.http.http3.enable": True,
        "network.http.http3.alt-svc-mapping-for-testing": f'{LAB_HOST};h3=":{port}"',
        "network.dns.localDomains": LAB_HOST,
        # Keep a fresh profile quiet: no update, telemetry or portal checks to other hosts.
        "app.update.enabled": False,
        "browser.shell.checkDefaultBrowser": False,
        "datareporting.policy.dataSubmissionEnabled": False,
        "toolkit.telemetry.reportingpolicy.firstRun": False,
        "network.captive-portal-service.enabled": False,
        "network.connectivity-service.enabled": False,
        "browser.safebrowsing.update.enabled": False,
        "extensions.update.enabled": False,
        "network.proxy.type": 0,
    }
    (profile / "user.js").write_text(
        "".join(f"user_pref({_js(name)}, {_js(value)});\n" for name, value in preferences.items())
    )
    return [executable, "--headless", "--no-remote", "--profile", str(profile), "--screenshot", str(workdir / "page.png"), url]


def _js(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def _start_capture(start: Starter, port: int, capture_file: Path, log: Path) -> None:
    # SIGINT lets dumpcap finish the file.
    dumpcap = start([dumpcap_path(), "-i", "lo", "-f", f"udp port {port}", "-w", str(capture_file)], log,
                    first_signal=signal.SIGINT)
    wait_until_capturing(dumpcap, log)


def _wait_for_hello(browser: subprocess.Popen, capture_file: Path, port: int, timeout: float) -> None:
    from scanner.capture.extract import read_capture
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if capture_file.exists() and capture_file.stat().st_size > 0:
            with contextlib.suppress(ToolError):  # the file may end mid-packet while it is written
                if read_capture(capture_file, ports=(port,)).hellos:
                    return
        if browser.poll() is not None:
            return
    raise ToolError(f"{browser.args[0]} sent no complete QUIC ClientHello within {timeout:.0f} s")


def _has_secrets(keylog_file: Path) -> bool:
    return keylog_file.exists() and b"SERVER_HANDSHAKE_TRAFFIC_SECRET" in keylog_file.read_bytes()
