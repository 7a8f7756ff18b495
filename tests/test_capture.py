"""qscan pcap on the project's own captures: what tshark 4.0 gets wrong, we must get right."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import duckdb
import jsonschema
import pytest
from aioquic.quic.packet import QuicPacketType
from hypothesis import given, strategies as st

from capturing import assert_decodes_as_tshark
from common import pcap
from scanner.capture.extract import read_capture
from common.tshark import tshark_path
from scanner.capture.frontend import Datagram, long_header_datagrams, write_udp_pcap
from scanner.handshake.packets import (
    CryptoStream,
    crypto_frame,
    crypto_frames,
    initial_keys,
    long_packets,
    seal_long_packet,
    unprotect,
)
from tparams.setfile import paramset_from_document

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "datasets" / "captures"
CHROMIUM = next(CAPTURES.glob("chromium-*.pcapng"))
FIREFOX = next(CAPTURES.glob("firefox-esr-*.pcapng"))
MIXED = CAPTURES / "mixed-clients.pcapng"
DRAFT29 = CAPTURES / "gtlsclient-draft29.pcapng"
# The public captures beside the clone (tests/test_capture_suite.py reads them all; never copied in).
SHARED = ROOT.parent / "shared" / "captures"
MANY = SHARED / "ndpi_quic_interop_V.pcapng"  # 63 ClientHellos of one client, more than LISTED
DRAFT_27, DRAFT_28, DRAFT_29 = 0xFF00001B, 0xFF00001C, 0xFF00001D
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


def test_malformed_key_log_lines_are_counted_in_one_warning(tmp_path: Path) -> None:
    """A key log with damaged lines (one cut mid-secret, one of other text) still opens what its good lines
    open; the damaged ones are named once, by number and the first's line, not skipped in silence."""
    lines = FIREFOX.with_suffix(".keys").read_text().splitlines()
    assert lines[0].startswith("#")  # a comment, which is no damage
    damaged = tmp_path / "damaged.keys"
    damaged.write_text("\n".join([*lines[:2], "CLIENT_RANDOM 0123", *lines[2:], "not a key log line", lines[-1][:40]]) + "\n")
    done = qscan("pcap", str(FIREFOX), "--keylog", str(damaged), "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == f"qscan: warning: key log {damaged}: 3 malformed line(s) skipped (the first: line 3)"
    assert len(done.stderr.splitlines()) == 2  # and the summary line
    assert all(json.loads(line)["server_parameters"] for line in done.stdout.splitlines())
    clean = qscan("pcap", str(FIREFOX), "--keylog", str(FIREFOX.with_suffix(".keys")), "--json")
    assert "warning" not in clean.stderr, clean.stderr


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
    assert f"wrote set {tmp_path / 'ff-test.json'}; qreplay --set {tmp_path / 'ff-test.json'} replays it\n" in done.stderr
    document = json.loads((tmp_path / "ff-test.json").read_text())
    jsonschema.validate(document, json.loads((ROOT / "schemas" / "paramset.schema.json").read_text()))
    hello = read_capture(FIREFOX).hellos[0]
    assert paramset_from_document(document).as_sent()["initial_max_data"] == hello.transport_parameters.get("initial_max_data")
    extra_ids = [e["id"] for e in document["extra_parameters"]]
    assert 0x0F not in extra_ids, "initial_source_connection_id belongs to one connection, not to the set"
    assert 0x11 in extra_ids  # version_information is kept


def test_as_set_says_it_writes_into_the_checkout_by_default() -> None:
    help_text = subprocess.run([*QSCAN, "pcap", "--help"], capture_output=True, text=True,
                               env={**os.environ, "COLUMNS": "400"}).stdout
    assert "into --sets-dir, by default this checkout's datasets/sets beside the built-in sets" in help_text
    name = f"qtp-test-{os.getpid()}"
    written = ROOT / "datasets" / "sets" / f"{name}.json"
    try:
        done = qscan("pcap", str(FIREFOX), "--as-set", name)
        assert done.returncode == 0 and written.is_file(), done.stderr
    finally:
        written.unlink(missing_ok=True)
    assert (f"wrote set {written} (this checkout's datasets/sets, beside the built-in sets; --sets-dir writes "
            f"elsewhere); qreplay --set {name} replays it\n") in done.stderr


def test_a_capture_cut_short_keeps_what_came_before_with_one_warning(tmp_path: Path) -> None:
    truncated = tmp_path / "truncated.pcapng"
    truncated.write_bytes(CHROMIUM.read_bytes()[:3000])  # inside the third packet, after the first ClientHello (packets 1-2)
    done = qscan("pcap", str(truncated), "--json", "--out", str(tmp_path / "cut.duckdb"))
    assert done.returncode == 0, done.stderr
    warning, summary = done.stderr.splitlines()
    assert warning.startswith("qscan: warning: ") and "at byte 2,916 (after packet 2)" in warning, warning
    assert [json.loads(line)["frame"] for line in done.stdout.splitlines()] == [2]
    with duckdb.connect(str(tmp_path / "cut.duckdb"), read_only=True) as con:
        assert con.execute("SELECT list(frame) FROM client_hellos").fetchone()[0] == [2]


def _damaged_block_length(capture: Path, at: int, length: int) -> bytes:
    """The capture with the pcapng block at byte ``at`` claiming ``length`` bytes (a length no block has)."""
    data = bytearray(capture.read_bytes())
    assert struct.unpack_from("<I", data, at)[0] == 6, "not an enhanced packet block"
    struct.pack_into("<I", data, at + 4, length)
    return bytes(data)


@pytest.mark.parametrize("damage,problem", [("bad block length", "a damaged block header (block length 5)"),
                                            ("cut", "the capture ends inside a block (100 of 136 bytes)")])
def test_a_capture_damaged_mid_file_or_cut_keeps_what_came_before_with_one_warning(tmp_path: Path, damage: str,
                                                                                    problem: str) -> None:
    """A bad block length in the middle (not at the end), or a cut inside a block: the ClientHellos before it
    (frames 2, 9 and 14 of five) are stored, one warning names the byte, and the command succeeds; two
    workers each read to the damage and together store what one process stores, warning once, not per worker."""
    data = MIXED.read_bytes()
    path = tmp_path / "damaged.pcapng"
    # frame 17's block, between two ClientHellos
    path.write_bytes(_damaged_block_length(MIXED, 16_932, 5) if damage == "bad block length" else data[:16_932 + 100])
    stored = []
    for workers in ("1", "2"):
        out = tmp_path / f"{workers}.duckdb"
        done = qscan("pcap", str(path), "--out", str(out), "--workers", workers)
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines() == [
            f"qscan: warning: {path}: {problem} at byte 16,932 (after packet 17); packets from there on are not "
            "read; the 3 ClientHello(s) before it are kept"]
        with duckdb.connect(str(out), read_only=True) as con:
            assert con.execute("SELECT list(frame ORDER BY hello_id) FROM client_hellos").fetchone()[0] == [2, 9, 14]
            stored.append((con.execute("SELECT * FROM client_hellos ORDER BY hello_id").fetchall(),
                           con.execute("SELECT * FROM client_hello_parameters ORDER BY ALL").fetchall()))
    assert stored[0] == stored[1]


@pytest.mark.skipif(not MANY.is_file(), reason=f"the public captures are not at {SHARED} (beside the clone)")
def test_many_client_hellos_are_summarised_by_set(tmp_path: Path) -> None:
    """More than LISTED ClientHellos: one title counting them and their sets, a row per set, not per
    ClientHello; every one still stored. One set is said as one ("1 parameter set", not "sets")."""
    from scanner.commands.capture import LISTED
    hellos = read_capture(MANY).hellos
    assert len(hellos) == 63 > LISTED
    out = tmp_path / "many.duckdb"
    done = subprocess.run([*QSCAN, "pcap", str(MANY), "--out", str(out)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "300"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].strip() == f"63 ClientHellos in 1 parameter set (0x0a0a0a0a 63) -> {out}; the set", lines[0]
    fingerprint = hellos[0].set_fingerprint
    assert [line for line in lines if line.startswith("│ ") and line[2:3] != " "] == [
        next(line for line in lines if fingerprint in line)], "one row, the set's"
    assert "63" in next(line for line in lines if fingerprint in line)
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM client_hellos").fetchone()[0] == 63


def test_the_summary_lists_the_most_common_sets_only(tmp_path: Path, monkeypatch, capsys) -> None:
    """Many sets: the title says how many, and the table lists the TOP_SETS most common, most common first
    (the ClientHellos of every real capture here and beside the clone, together)."""
    from collections import Counter
    from scanner.capture.results import HelloTally
    from scanner.commands.capture import TOP_SETS, _report
    from tparams.errors import ToolError
    tally = HelloTally()
    for capture in [*sorted(CAPTURES.glob("*.pcapng")), *sorted(SHARED.glob("*.pcap*"))]:
        with contextlib.suppress(ToolError):  # captures without a ClientHello
            result = read_capture(capture)
            tally.add(result.hellos)
    sets = Counter(tally.sets)
    if len(sets) <= TOP_SETS:
        pytest.skip(f"{len(sets)} sets, not more than {TOP_SETS}: the public captures are not at {SHARED}")
    monkeypatch.setenv("COLUMNS", "300")
    _report(tally, result.summary, False, None)
    lines = capsys.readouterr().out.splitlines()
    assert f"ClientHellos in {len(sets)} parameter sets (" in lines[0] and lines[0].strip().endswith(
        f"; the {TOP_SETS} most common sets"), lines[0]
    listed = [fingerprint for line in lines for fingerprint in sets if line.startswith(f"│ {fingerprint} ")]
    assert listed == [fingerprint for fingerprint, _ in sets.most_common(TOP_SETS)]


def test_bad_captures_give_one_line_and_status_2(tmp_path: Path) -> None:
    truncated = tmp_path / "truncated.pcapng"
    truncated.write_bytes(CHROMIUM.read_bytes()[:1000])  # inside the first packet
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
        truncated: "the capture ends inside a block",
        text: "not a pcap or pcapng capture",
        dns_only: "no QUIC",
        tmp_path / "missing.pcap": "no such capture file",
    }
    for path, message in cases.items():
        done = qscan("pcap", str(path))
        assert done.returncode == 2, (path, done.stderr)
        assert "Traceback" not in done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("qscan: error:") and message in lines[0], done.stderr


def _pcapng_block(kind: int, body: bytes) -> bytes:
    body += bytes(-len(body) % 4)
    return struct.pack("<II", kind, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))


def test_a_nanosecond_clock_reads_as_python_divides(tmp_path: Path) -> None:
    """Time stamps of a pcapng interface with a nanosecond clock (if_tsresol 9) and one of 2^-20 s: ticks
    past 2^53, which a float divided by 1e9 rounds twice (1618189305.7430642 s for the first here)."""
    capture = tmp_path / "clocks.pcapng"
    datagram = Datagram(1, 0.0, "198.18.0.1", 50000, "198.18.0.2", 443, b"\xc0payload")
    write_udp_pcap(tmp_path / "one.pcap", [datagram])
    frame = (tmp_path / "one.pcap").read_bytes()[24 + 16:]
    ticks = [1_618_189_305_743_064_004, 1_700_000_000_123_456_789, 1_700_000_000 << 20 | 12345]
    blocks = [_pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))]
    for resolution in (9, 0x80 | 20):
        options = struct.pack("<HHB3x", 9, 1, resolution) + struct.pack("<HH", 0, 0)
        blocks.append(_pcapng_block(1, struct.pack("<HHI", 101, 0, 65535) + options))
    for interface, tick in [(0, ticks[0]), (0, ticks[1]), (1, ticks[2])]:
        blocks.append(_pcapng_block(6, struct.pack("<IIIII", interface, tick >> 32, tick & 0xFFFFFFFF, len(frame), len(frame)) + frame))
    capture.write_bytes(b"".join(blocks))
    times = [d.time for d in long_header_datagrams(capture)]
    assert times == [ticks[0] / 10**9, ticks[1] / 10**9, ticks[2] / 2**20]
    assert times[0] != float(ticks[0]) / 1e9


def test_addresses_read_as_inet_ntop_writes_them(tmp_path: Path) -> None:
    """IPv6 addresses as socket.inet_ntop (the C library's) writes them: the first longest run of zero groups
    as "::", IPv4 dotted after 96 zero bits or ::ffff:, and as it is after ::ffff:0:."""
    addresses = ["::", "::1", "::2", "1::", "::1.2.3.4", "::ffff:1.2.3.4", "::ffff:0:102:304", "1:0:0:2::3",
                 "1::2:0:0:3", "2001:2::1", "1:2:3:4:5:6:7:8", "fe80::1:0:0:0:1", "0:1::"]
    frames = []
    for address in addresses:
        packed = socket.inet_pton(socket.AF_INET6, address)
        udp = struct.pack("!HHHH", 50000, 443, 9, 0) + b"\xc0"
        frames.append((1.0, struct.pack("!IHBB", 0x60000000, len(udp), 17, 64) + packed + packed + udp))
    pcap.write(tmp_path / "six.pcap", pcap.LINKTYPE_RAW, frames)
    expected = [socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, a)) for a in addresses]
    assert [d.src_ip for d in long_header_datagrams(tmp_path / "six.pcap")] == expected


# draft-ietf-quic-tls-27 and -29, Appendix A.2: the sample client Initial's CRYPTO frame (the same in
# both; the rest of its 1162-byte payload is PADDING), its unprotected header (packet number 2), and of
# the published protected packet the first 32 bytes and the last 16, the AEAD tag, which authenticates
# everything before it: keys one bit off would change both.
DRAFT_SAMPLE_DCID = bytes.fromhex("8394c8f03e515708")
DRAFT_SAMPLE_CRYPTO = bytes.fromhex(
    "060040c4010000c003036660261ff947cea49cce6cfad687f457cf1b14531ba14131a0e8f309a1d0b9c4000006130113"
    "031302010000910000000b0009000006736572766572ff01000100000a00140012001d00170018001901000101010201"
    "03010400230000003300260024001d00204cfdfcd178b784bf328cae793b136f2aedce005ff183d7bb14952072366470"
    "37002b0003020304000d0020001e040305030603020308040805080604010501060102010402050206020202002d0002"
    "0101001c00024001"
)
DRAFT_SAMPLES = {
    DRAFT_27: (
        "c3ff00001b088394c8f03e5157080000449e00000002",
        "c0ff00001b088394c8f03e5157080000449e3b343aa8535064a4268a0d9d7b1c",
        "38d3b779d72edc00c5cd088eff802b05",
    ),
    DRAFT_29: (
        "c3ff00001d088394c8f03e5157080000449e00000002",
        "c5ff00001d088394c8f03e5157080000449e4a95245bfb66bc5f93032b7ddd89",
        "43b1ca70a2d8d3f725ead1391377dcc0",
    ),
}


@pytest.mark.parametrize("version", sorted(DRAFT_SAMPLES), ids=["draft-27", "draft-29"])
def test_drafts_sample_client_initial_is_reproduced_and_opened(version: int) -> None:
    header, first_bytes, tag = (bytes.fromhex(h) for h in DRAFT_SAMPLES[version])
    keys = initial_keys(DRAFT_SAMPLE_DCID, version, of_client=True)
    payload = DRAFT_SAMPLE_CRYPTO + bytes(1162 - len(DRAFT_SAMPLE_CRYPTO))
    protected = keys.encrypt_packet(header, payload, 2)
    assert (len(protected), protected[:32], protected[-16:]) == (1200, first_bytes, tag)
    (packet,) = long_packets(protected)
    assert (packet.version, packet.packet_type, packet.dcid) == (version, QuicPacketType.INITIAL, DRAFT_SAMPLE_DCID)
    assert unprotect(packet, keys) == (2, payload)


def tshark_versions(capture: Path) -> dict[int, int]:
    """frame -> the QUIC version tshark reads in each packet carrying a ClientHello."""
    command = [tshark_path(), "-n", "-r", str(capture), "-Y", "tls.handshake.type == 1", "-T", "fields"]
    done = subprocess.run([*command, "-e", "frame.number", "-e", "quic.version"], capture_output=True, text=True, check=True)
    return {int(frame): int(version, 16) for frame, version in (line.split("\t") for line in done.stdout.splitlines())}


def test_draft29_capture_records_the_version_as_sent() -> None:
    """ngtcp2's client speaking draft-29 to gtlsserver: tshark and we read the same version and
    parameters, the server's too (its Handshake packets open with draft-29's labels)."""
    (hello,) = assert_decodes_as_tshark(DRAFT29)
    assert hello.quic_version == DRAFT_29 == tshark_versions(DRAFT29)[hello.frame]
    assert hello.transport_parameters.get("initial_max_data") == 15728640
    assert hello.alpn == ("h3",)
    keylog = DRAFT29.with_suffix(".keys")
    (keyed,) = read_capture(DRAFT29, keylog=keylog).hellos
    server = keyed.server_transport_parameters
    assert server is not None and server.get("original_destination_connection_id") == hello.original_dcid
    command = [tshark_path(), "-n", "-r", str(DRAFT29), "-o", f"tls.keylog_file:{keylog}", "-Y", "tls.handshake.type == 8"]
    command += ["-T", "fields", "-e", "tls.quic.parameter.type", "-e", "tls.quic.parameter.initial_max_data", "-E", "occurrence=a"]
    types, initial_max_data = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip().split("\t")
    assert [int(t) for t in types.split(",")] == list(server.ids)
    assert server.get("initial_max_data") == int(initial_max_data)


def test_drafts_codepoint_0xffa5_in_draft_27_28_29_initials_decodes_as_tshark_does(tmp_path: Path) -> None:
    """The drafts carried the parameters in extension 0xffa5 (ngtcp2 0.12 sends 0x39 even in draft-29):
    its ClientHello with the codepoint changed, protected here as a draft-27, -28 and -29 Initial."""
    (hello,) = read_capture(DRAFT29).hellos
    first = next(long_packets(next(long_header_datagrams(DRAFT29)).payload))
    message = CryptoStream().add_frames(unprotect(first, initial_keys(first.dcid, first.version, of_client=True))[1])
    raw = hello.transport_parameters.raw
    extension = len(raw).to_bytes(2, "big") + raw
    assert message is not None and message.count(b"\x00\x39" + extension) == 1
    message = message.replace(b"\x00\x39" + extension, b"\xff\xa5" + extension)
    versions = (DRAFT_27, DRAFT_28, DRAFT_29)
    datagrams = []
    for n, version in enumerate(versions, 1):
        dcid = bytes([n]) * 8
        keys = initial_keys(dcid, version, of_client=True)
        sealed = seal_long_packet(keys, version, QuicPacketType.INITIAL, dcid, b"\xee" * 8, 0, crypto_frame(0, message), min_size=1200)
        datagrams.append(Datagram(n, 1_600_000_000 + n, "198.18.0.1", 50000 + n, "198.18.0.2", 443, sealed))
    capture = tmp_path / "drafts.pcap"
    write_udp_pcap(capture, datagrams)
    hellos = assert_decodes_as_tshark(capture)
    assert [h.quic_version for h in hellos] == list(versions)
    assert tshark_versions(capture) == {h.frame: h.quic_version for h in hellos}, "tshark reads other versions or fewer ClientHellos"
    assert all(h.transport_parameters.raw == raw for h in hellos)


def test_summary_counts_what_no_key_opens(tmp_path: Path) -> None:
    """Captures of 2020-2023 mix draft Initials with Google QUIC, greased versions and Version
    Negotiation: the line that says no ClientHello was found counts each of them, by version, apart
    from Initials of versions with known keys that do not open (here opaque bytes and a damaged tag)."""
    dcid = bytes(range(8))

    def long_header(version: bytes) -> bytes:  # an Initial's first bytes in any version, then opaque bytes
        return b"\xc3" + version + b"\x08" + dcid + b"\x00" + bytes(1200 - 15)

    keys = initial_keys(dcid, DRAFT_29, of_client=True)
    damaged = bytearray(seal_long_packet(keys, DRAFT_29, QuicPacketType.INITIAL, dcid, b"", 0, crypto_frame(0, b"\x01"), min_size=1200))
    damaged[-1] ^= 1  # the AEAD tag no longer matches
    version_negotiation = b"\x80" + bytes(4) + b"\x00\x08" + dcid + DRAFT_29.to_bytes(4, "big") + (1).to_bytes(4, "big")
    payloads = [long_header(b"Q050")] * 2 + [long_header(b"T051")] + [long_header(bytes.fromhex("1a2a3a4a"))] * 3
    payloads += [long_header(bytes.fromhex("ff00001a")), bytes(damaged), version_negotiation]
    capture = tmp_path / "left-out.pcap"
    write_udp_pcap(capture, (Datagram(n, 1_600_000_000 + n, "198.18.0.1", 50000, "198.18.0.2", 443, p) for n, p in enumerate(payloads, 1)))
    done = qscan("pcap", str(capture))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().endswith(
        "no complete QUIC ClientHello among 9 long-header datagrams (0 client Initials opened, 3 not "
        "(T051 1, draft-26 1, draft-29 1), 5 packets of other versions (0x1a2a3a4a 3, Q050 2), 1 Version Negotiation)"
    ), done.stderr


def test_workers_store_what_one_process_stores(tmp_path: Path) -> None:
    """Two worker processes, each following half of the connections, and one process give the same rows,
    numbered alike (a big capture is read by one worker per core)."""
    tables = []
    for workers in ("1", "2"):
        out = tmp_path / f"{workers}.duckdb"
        done = qscan("pcap", str(MIXED), "--out", str(out), "--workers", workers)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        with duckdb.connect(str(out), read_only=True) as con:
            tables.append((con.execute("SELECT * FROM client_hellos ORDER BY hello_id").fetchall(),
                           con.execute("SELECT * FROM client_hello_parameters ORDER BY ALL").fetchall()))
    assert len(tables[0][0]) == 5 and tables[0] == tables[1]


def test_connections_past_the_limit_are_forgotten_oldest_first(monkeypatch) -> None:
    """A capture of more connections than MAX_CONNECTIONS is followed within it, each ClientHello still
    found: the least recently heard connection is the one forgotten."""
    from scanner.capture import extract

    monkeypatch.setattr(extract, "MAX_CONNECTIONS", 2)
    extractor = extract.HelloExtractor()
    held = []
    for datagram in long_header_datagrams(MIXED):
        extractor.feed(datagram)
        held.append(len(extractor._by_dcid))
    assert max(held) == 2, "the connection table outgrew its limit, or never reached it"
    assert [h.frame for h in extractor.finish()] == [h.frame for h in read_capture(MIXED).hellos]
    assert len(extractor._by_flow) <= 2


def test_a_scan_file_cut_short_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """DuckDB finds a file cut short only when a query reaches the missing block, deep in a command: the
    command still ends in one line naming the file (a copy taken while a scan wrote it, a full disk)."""
    whole = tmp_path / "scan.duckdb"
    assert qscan("pcap", str(MIXED), "--out", str(whole), "--quiet").returncode == 0
    assert qscan("report", str(whole)).returncode == 0
    data = whole.read_bytes()
    for fraction in (2, 3):
        cut = tmp_path / f"cut{fraction}.duckdb"
        cut.write_bytes(data[:len(data) // fraction])
        done = qscan("report", str(cut))
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert lines[0].startswith("qscan: error:") and str(cut) in lines[0], lines
