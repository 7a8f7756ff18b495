"""Waiting for a running tshark capture to hold what was sent (its file lags the wire), and
comparing our reading of a capture with tshark's."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

from common.process import start_process, stop_process
from common import netns
from scanner.capture.extract import ClientHelloRecord, read_capture
from common.tshark import wait_until_capturing, wait_until_in_capture
from scanner.capture.frontend import TSHARK_NAMED, tshark_client_hellos
from tparams.paramset import ParamSet


@contextmanager
def captured_handshakes(ns: str, pcap: Path, log: Path):
    """tshark in ``ns`` for the block's duration; long-header packets only (the handshake), so the
    capture stays small whatever the download's size."""
    tshark = start_process(ns, ["tshark", "-i", "any", "-q", "-w", str(pcap), "-f", "udp and udp[8] & 0x80 != 0"],
                                 log)
    try:
        wait_until_capturing(tshark, log)
        yield
        with netns.in_namespace(ns):
            wait_until_in_capture(pcap, "127.0.0.1")
    finally:
        stop_process(tshark.pid)


def assert_applied_is_on_the_wire(row: dict, pcap: Path, keylog: Path, asks: dict[str, list[str]]) -> None:
    """The run's one ClientHello (Initial keys) and the server's EncryptedExtensions (the key log) hold
    exactly the values the run stored as applied, and differ where it stored not applied; ``asks`` are the
    NAME=VALUE requests of each role."""
    (hello,) = read_capture(pcap, keylog=keylog).hellos
    assert hello.server_transport_parameters is not None, "the server's EncryptedExtensions did not decrypt"
    on_wire = {"client": ParamSet.from_decoded(hello.transport_parameters).effective(),
               "server": ParamSet.from_decoded(hello.server_transport_parameters).effective()}
    for role, asked in asks.items():
        applied, not_applied = json.loads(row[f"applied_{role}"]), json.loads(row[f"not_applied_{role}"])
        assert len(applied) + len(not_applied) == len(asked), role
        assert {k: on_wire[role][k] for k in applied} == applied, (role, on_wire[role])
        wrongly_missed = {k: v for k, v in not_applied.items() if on_wire[role][k] == v}
        assert not wrongly_missed, (role, "reported not applied, yet on the wire", wrongly_missed)


def assert_decodes_as_tshark(capture: Path) -> list[ClientHelloRecord]:
    """Every ClientHello tshark decodes in ``capture`` is among ours with the same parameter ids in
    the same order, the same lengths, and the same value for every parameter tshark names; ours returned."""
    theirs = tshark_client_hellos(capture)
    hellos = read_capture(capture).hellos
    ours = {hello.frame: hello.transport_parameters for hello in hellos}
    assert theirs, f"tshark decodes no ClientHello in {capture.name}: this vector no longer cross-checks anything"
    assert set(theirs) <= set(ours), "a ClientHello tshark decodes is missing from our extraction"
    for frame, tshark in theirs.items():
        decoded = ours[frame]
        assert not decoded.findings
        assert list(decoded.ids) == tshark["type"], f"frame {frame}: wire order differs"
        assert [len(p.raw) for p in decoded.parameters] == tshark["length"]
        for name in TSHARK_NAMED:
            assert decoded.get(name) == (tshark[name][0] if name in tshark else None), f"frame {frame}: {name}"
    return hellos
