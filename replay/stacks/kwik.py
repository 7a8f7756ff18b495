"""kwik 0.10.8 (QUIC in Java) with flupke 0.9.4 (its HTTP/3) as a server for the browsers: the lab's kwik server
(lab/servers/kwik, a jar scripts/setup.sh builds into the cache), which answers as every qreplay h3 server does
(lab/servers/common/src/page.rs): the page and its files from QREPLAY_HTDOCS, ``GET /<size>`` with that many
bytes, a PUT or POST with the count of body bytes read.

A server only: kwik's client is not driven here, and its server speaks HTTP/3 alone. Its command line is the
lab-server one (tparams.program_cli), so what it sends of a set is what the lab's kwik kind predicts
(lab.kinds.kwik.sent_parameters); a value it sends otherwise is reported as not applied:

- kwik has ONE window for every bidi stream: it is given the set's initial_max_stream_data_bidi_remote (the
  window of the streams a browser opens, its requests and uploads; an HTTP/3 server opens no bidi stream), and
  sends that for initial_max_stream_data_bidi_local too;
- flupke raises a bidi window below 5,120 to 5,120, pins initial_max_stream_data_uni to 1,024 and caps
  initial_max_streams_uni at 3; kwik raises initial_max_data to the stream window where it is smaller;
- kwik refuses a max_idle_timeout of 0 (no timeout): it is left out, kwik sends its 30 s;
- kwik's API has no setting for max_udp_payload_size, ack_delay_exponent, max_ack_delay,
  disable_active_migration nor active_connection_id_limit: it sends its own (the descriptor's ``fixed``).

It is started warmed: five handshakes with itself before it listens (a fresh JVM's handshake took 0.2-1.1 s and
slowed the start of Chromium's uploads, docs/qreplay.md), which costs it up to 2 s to start and 0.2-0.3 s of CPU.

A response can stop for good in the middle (3 of 150 pages of 20 objects under load, 2026-11-29): a race in kwik
0.10.8's StreamOutputStreamImpl loses the stream's send request, leaving its remaining bytes in the send buffer;
such a run fails at its timeout (docs/qreplay.md).

Absent from the set, the windows and stream counts take the values quiche's example server uses (as our other
programs do; kwik's own are 0: no stream at all). Its congestion control is kwik's only one, NewReno.
"""

from __future__ import annotations

from lab.builds import built_jar, jar_unavailable
from lab.kinds.kwik import sent_parameters
from replay.stacks.base import HTDOCS_ENV, Applied, PageServer, ensure_certificate
from common import versions
from tparams import program_cli

#: what its command line carries of a set (bidi_local through bidi_remote's one window, see above)
CARRIED = frozenset({"max_idle_timeout", "initial_max_data", "initial_max_stream_data_bidi_remote",
                     "initial_max_streams_bidi", "initial_max_streams_uni"})
#: taken where a set does not send them (quiche's example server's values; flupke allows 3 uni streams)
ABSENT = {"initial_max_data": 10_000_000, "initial_max_stream_data_bidi_remote": 1_000_000,
          "initial_max_streams_bidi": 100, "initial_max_streams_uni": 3}
#: why kwik sent another value of a parameter its command line carries (lab.kinds.kwik's limits)
WHY_NOT = {
    "initial_max_data": "kwik raises a connection window below its stream window to it: it sent {sent}",
    "initial_max_stream_data_bidi_local": "kwik has one window for both bidi directions: it sent bidi_remote's, "
                                          "{sent}",
    "initial_max_stream_data_bidi_remote": "flupke raises a bidi window below 5,120: it sent {sent}",
    "initial_max_stream_data_uni": "flupke pins the uni window: it sent {sent}",
    "initial_max_streams_uni": "flupke allows at most 3 uni streams: it sent {sent}",
}
WARM_UP_ENV = "QREPLAY_WARM_UP"
NOT_SETTABLE = ("max_udp_payload_size", "ack_delay_exponent", "max_ack_delay", "disable_active_migration",
                "active_connection_id_limit")


class Kwik(PageServer):
    name = "kwik"
    no_client = "kwik is a server only here (its h3 server, for the browsers): kwik's client is not driven"
    page_missing = {"paced": "kwik's h3 server (flupke) does not pace a stream"}
    settable = {"client": frozenset(), "server": CARRIED}
    cc_names = frozenset()
    cc_fallback = "newreno"

    def unavailable_reason(self) -> str | None:
        return jar_unavailable("kwik")

    def version(self) -> str | None:
        return versions.version(self.library.packages[0])

    def capabilities(self) -> str:
        return (f"server only (h3, flupke): sets {len(CARRIED)} of 12 (one window for both bidi directions, the "
                "set's bidi_remote); runs NewReno")

    def command_values(self, params) -> tuple[dict[str, int], Applied]:
        """The transport parameters its command line is given for ``params``, and what that applies of the set."""
        requested = {k: v for k, v in (params.as_sent() if params else {}).items() if v is not None}
        given = {**ABSENT, **{k: v for k, v in requested.items() if k in CARRIED}}
        out = Applied()
        if given.get("max_idle_timeout") == 0:
            del given["max_idle_timeout"]
            out.notes.append("kwik refuses a max_idle_timeout of 0 (none): it sent its own 30 s")
        sent = sent_parameters(given)
        out.applied = {k: v for k, v in requested.items() if sent.get(k) == v}
        out.not_applied = {k: v for k, v in requested.items() if k not in out.applied}
        for name, why in WHY_NOT.items():
            if name in out.not_applied:
                out.notes.append(why.format(sent=sent[name]))
        if bad := [k for k in NOT_SETTABLE if k in out.not_applied]:
            out.notes.append(f"kwik's API cannot set {', '.join(bad)}: it sent its own")
        return given, out

    def server_command(self, params, opts, ip, port, workdir):
        key, cert = ensure_certificate(workdir)
        given, applied = self.command_values(params)
        applied.add_knobs(self, opts, "server")
        (workdir / "htdocs").mkdir(exist_ok=True)
        applied.env[HTDOCS_ENV] = str(workdir / "htdocs")
        # Five handshakes with itself before it listens (KwikLabServer.warmUp): a fresh JVM took 0.2-1.1 s over
        # Chromium's handshake, which set Chromium's smoothed RTT and so paced an upload's first round trips at a
        # few Mbit/s (docs/qreplay.md). A deployed server is warm; the lab's kwik kind is not warmed.
        applied.env[WARM_UP_ENV] = "1"
        # The JVM as the lab runs it (lab.builds.JarServerKind): without the optimising compiler, whose threads
        # cost a run of a few seconds more CPU than they save it, and with the serial collector. Chromium's 5 MB
        # at 30 ms, 3 runs each way (2026-11-29, load 8): the server used 1.25-1.37 s of CPU with these, 1.94-2.3 s
        # with the default compilers and goodput 38-43 Mbit/s against 27-54.
        return applied.command(["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-jar", str(built_jar("kwik")),
                                *program_cli.arguments("lab-server", {
                                    "listen": program_cli.address(ip, port), "cert": cert, "key": key, **given}),
                                *applied.flags]), applied


STACK = Kwik()
