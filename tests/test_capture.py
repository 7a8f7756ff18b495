"""qscan pcap on the project's own captures: what tshark 4.0 gets wrong, we must get right."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import jsonschema
from hypothesis import given, strategies as st

from scanner.capture.extract import read_capture
from scanner.capture.frontend import long_header_datagrams
from scanner.handshake.packets import CryptoStream, crypto_frames, initial_keys, long_packets, unprotect
from tparams.setfile import paramset_from_document

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "datasets" / "captures"
CHROMIUM = next(CAPTURES.glob("chromium-*.pcapng"))
FIREFOX = next(CAPTURES.glob("firefox-esr-*.pcapng"))
MIXED = CAPTURES / "mixed-clients.pcapng"
QSCAN = [str(Path(sys.executable).parent / "qscan")]


def qscan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*QSCAN, *args], capture_output=True, text=True, timeout=120)


def client_crypto_offsets(capture: Path) -> list[list[int]]:
    """CRYPTO frame offsets of each packet of the first client's first flight, in capture order."""
    datagrams = list(long_header_datagrams(capture))
    first = next(long_packets(datagrams[0].payload))
    keys = initial_keys(first.dcid, first.version, of_client=True)
    offsets = []
    for datagram in datagrams:
        if datagram.src_port != datagrams[0].src_port:
            continue
        for packet in long_packets(datagram.payload):
            opened = unprotect(packet, keys)
            if opened:
                offsets.append([offset for offset, _ in crypto_frames(opened[1])])
    return offsets


@given(st.binary(min_size=4, max_size=3000), st.data())
def test_crypto_stream_reassembles_shuffled_repeated_overlapping_chunks(body: bytes, data) -> None:
    message = b"\x01" + len(body).to_bytes(3, "big") + body
    cuts = sorted(data.draw(st.sets(st.integers(1, len(message) - 1), max_size=20)))
    edges = [0, *cuts, len(message)]
    chunks = [(a, message[a:b]) for a, b in zip(edges, edges[1:])]
    chunks += data.draw(st.lists(st.sampled_from(chunks), max_size=5))  # retransmissions
    chunks.append((0, message[: len(message) // 2]))  # an overlapping, shorter repeat
    stream = CryptoStream()
    for offset, chunk in data.draw(st.permutations(chunks)):
        stream.add(offset, chunk)
    assert stream.message() == message


def test_chromium_sends_crypto_out_of_order_over_several_packets() -> None:
    offsets = client_crypto_offsets(CHROMIUM)
    assert len([o for o in offsets if o]) >= 2, "the ClientHello no longer spans several packets"
    assert offsets[0] != sorted(offsets[0]), "Chromium's CRYPTO frames arrive in order now"
    (hello,) = read_capture(CHROMIUM).hellos
    assert hello.sni == "lab.test" and hello.alpn == ("h3",)
    assert hello.transport_parameters.get("initial_max_data") == 15728640


def test_firefox_gso_batch_is_walked_across_padding() -> None:
    batch = next(d for d in long_header_datagrams(FIREFOX) if len(d.payload) > 1500)
    first, second = list(long_packets(batch.payload))[:2]
    gap = batch.payload[len(first.data) : batch.payload.index(second.data)]
    assert gap and set(gap) == {0}, "expected zero padding between the batched datagrams"
    assert len(read_capture(FIREFOX).hellos) >= 1


def test_keylog_adds_the_servers_encrypted_extensions() -> None:
    for capture in (CHROMIUM, FIREFOX):
        for hello in read_capture(capture, keylog=capture.with_suffix(".keys")).hellos:
            server = hello.server_transport_parameters
            assert server is not None, f"{capture.name}: no EncryptedExtensions opened"
            # The server echoes the client's first DCID (RFC 9000, 7.3): a check no bug passes by chance.
            assert server.get("original_destination_connection_id") == hello.original_dcid
    assert all(h.server_transport_parameters is None for h in read_capture(CHROMIUM).hellos)


def test_qscan_pcap_stores_one_row_per_client_hello(tmp_path: Path) -> None:
    out = tmp_path / "scan.duckdb"
    done = qscan("pcap", str(MIXED), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    expected = read_capture(MIXED).hellos
    assert len(printed) == len(expected) == 5  # chromium 1, firefox 2 (it retries), gtlsclient 1, aioquic 1
    with duckdb.connect(str(out), read_only=True) as con:
        rows = con.execute("SELECT hello_id, src_port, sni, initial_max_data, max_ack_delay FROM client_params ORDER BY hello_id").fetchall()
        assert [r[1] for r in rows] == [h.src_port for h in expected]
        assert [r[3] for r in rows] == [h.transport_parameters.get("initial_max_data") for h in expected]
        assert [r[4] for r in rows] == [h.transport_parameters.get("max_ack_delay") for h in expected]
        for (hello_id, *_), hello in zip(rows, expected):
            order = con.execute(
                "SELECT param_id FROM client_transport_parameters WHERE hello_id = ? ORDER BY position", [hello_id]
            ).fetchall()
            assert [o[0] for o in order] == list(hello.transport_parameters.ids)
    keylog = CHROMIUM.with_suffix(".keys")
    again = qscan("pcap", str(CHROMIUM), "--out", str(out), "--keylog", str(keylog))  # appends to the same file
    assert again.returncode == 0, again.stderr
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("SELECT count(DISTINCT hello_id), count(DISTINCT scan_id) FROM client_params").fetchone() == (6, 2)
        echoed = con.execute(
            "SELECT s.raw_hex, lower(hex(h.original_dcid)) FROM capture_server_transport_parameters s "
            "JOIN client_hellos h USING (hello_id) WHERE s.name = 'original_destination_connection_id'"
        ).fetchall()
        assert len(echoed) == 1 and echoed[0][0] == echoed[0][1]


def test_as_set_writes_a_valid_replayable_set(tmp_path: Path) -> None:
    ambiguous = qscan("pcap", str(MIXED), "--as-set", "mixed", "--sets-dir", str(tmp_path))
    assert ambiguous.returncode == 2 and "--hello" in ambiguous.stderr
    done = qscan("pcap", str(FIREFOX), "--as-set", "ff-test", "--sets-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    document = json.loads((tmp_path / "ff-test.json").read_text())
    jsonschema.validate(document, json.loads((ROOT / "schemas" / "paramset.schema.json").read_text()))
    hello = read_capture(FIREFOX).hellos[0]
    assert paramset_from_document(document).as_sent()["initial_max_data"] == hello.transport_parameters.get("initial_max_data")
    extra_ids = [e["id"] for e in document["extra_parameters"]]
    assert 0x0F not in extra_ids, "initial_source_connection_id belongs to one connection, not to the set"
    assert 0x11 in extra_ids  # version_information is kept


def test_bad_captures_give_one_line_and_status_2(tmp_path: Path) -> None:
    truncated = tmp_path / "truncated.pcapng"
    truncated.write_bytes(CHROMIUM.read_bytes()[:3000])
    dns_only = tmp_path / "dns.pcap"
    subprocess.run(
        ["text2pcap", "-q", "-4", "10.0.0.1,10.0.0.2", "-u", "5353,53", "-", str(dns_only)],
        input=b"0000 12 34 01 00 00 01 00 00 00 00 00 00\n",
        check=True,
    )
    # Text of our own: tshark guesses formats from content, and took a revision of the README for 802.11.
    text = tmp_path / "notes.txt"
    text.write_text("These are notes, not packets.\n")
    cases = {
        truncated: "cut short",
        text: "isn't a capture file",
        dns_only: "no QUIC",
        tmp_path / "missing.pcap": "no such capture file",
    }
    for path, message in cases.items():
        done = qscan("pcap", str(path))
        assert done.returncode == 2, (path, done.stderr)
        assert "Traceback" not in done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("qscan: error:") and message in lines[0], done.stderr
