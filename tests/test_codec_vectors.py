"""The codec against tshark on real Initials the project captured itself (datasets/captures).

Wherever tshark 4.0 decodes a ClientHello, our extraction plus tparams.codec
must give the same parameter ids in the same order, the same lengths, and the
same values for every parameter tshark names. Where it does not (Firefox's
GSO batch), we must still find the complete set.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from capturing import assert_decodes_as_tshark
from scanner.capture.extract import read_capture
from scanner.capture.frontend import TSHARK_NAMED, tshark_client_hellos
from tparams.codec import decode_transport_parameters

CAPTURES = Path(__file__).resolve().parent.parent / "datasets" / "captures"
CHROMIUM = next(CAPTURES.glob("chromium-*.pcapng"))
FIREFOX = next(CAPTURES.glob("firefox-esr-*.pcapng"))
@pytest.mark.parametrize("capture", ["chromium", "gtlsclient", "aioquic", "mixed-clients", "gtlsclient-draft29"])
def test_codec_agrees_with_tshark_where_tshark_decodes(capture: str) -> None:
    assert_decodes_as_tshark(CHROMIUM if capture == "chromium" else CAPTURES / f"{capture}.pcapng")


def test_chromium_initial_decodes_to_tshark_values_and_order() -> None:
    """The foundation's acceptance vector: a real Chromium Initial through the codec."""
    (frame, tshark), = tshark_client_hellos(CHROMIUM).items()
    hello = next(h for h in read_capture(CHROMIUM).hellos if h.frame == frame)
    raw = hello.transport_parameters.raw
    decoded = decode_transport_parameters(raw, sender="client")
    assert list(decoded.ids) == tshark["type"]
    assert {name: decoded.get(name) for name in TSHARK_NAMED if name in tshark} == {
        name: tshark[name][0] for name in TSHARK_NAMED if name in tshark
    }
    names = [p.name for p in decoded.parameters]
    # Chromium greases: one reserved id (31*N+27) among Google's and the IANA ones.
    assert "GREASE" in names and "google_connection_options" in names and "version_information" in names


def test_firefox_gso_capture_defeats_tshark_but_not_us() -> None:
    assert tshark_client_hellos(FIREFOX) == {}, "tshark 4.0 now decodes Firefox's GSO batch: move it to the test above"
    hellos = read_capture(FIREFOX).hellos
    assert hellos
    for hello in hellos:
        decoded = hello.transport_parameters
        assert not decoded.findings
        assert decoded.get("initial_max_data") and decoded.get("initial_max_streams_bidi")
        assert "initial_source_connection_id" in [p.name for p in decoded.parameters]
