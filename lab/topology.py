"""What the lab looks like: addresses, namespaces and servers, as data.

Layout (all inside 198.18.0.0/15 and 2001:2::/48, the benchmarking ranges of RFC 2544 and
RFC 5180; nothing routes out). The lab is dual-stack: every address below also has an IPv6
twin, ipv6_of(ip), its last two octets written as the hex digits of two groups
(198.18.1.10 -> 2001:2:0:1::10, 198.18.0.2 -> 2001:2::2), in 2001:2:0:X::/64 subnets;
the IPv6 routes are those of IPv4 (the client's default via the core, the servers' only
route 2001:2::/48), and 2001:2:0:1::240/123 is the silent range's twin.

    client ns  eth0 198.18.0.2/24 ── default via 198.18.0.1 (its ONLY route off-link)
       │
    core ns    client0 198.18.0.1/24, bridge lab0 198.18.1.1/24, ip_forward=1,
       │       no default route, 198.18.1.240/28 blackholed (silent addresses)
       ├── one namespace per server: eth0 198.18.1.X/24, route 198.18.0.0/15 via 198.18.1.1
       ├── the UDP-closed host: address up, nothing listening (ICMP port unreachable)
       └── the resolver (default lab): a DNS server for the lab's domains

Addresses of the default lab (port 443 everywhere):

    198.18.1.10  ngtcp2-alpha       alpha.lab.test      ngtcp2 gtlsserver, thesis set alpha
    198.18.1.11  ngtcp2-beta        beta.lab.test       ngtcp2 gtlsserver, thesis set beta
    198.18.1.20  caddy              caddy.lab.test      caddy (quic-go), HTTP/3 + HTTPS/TCP with Alt-Svc
    198.18.1.30  aioquic            aioquic.lab.test    our aioquic HTTP/3 server
    198.18.1.40  broken-garbage     garbage.lab.test    answers every datagram with random bytes
    198.18.1.41  broken-duplicate   duplicate.lab.test  real handshake, initial_max_data sent twice
    198.18.1.42  broken-truncated   truncated.lab.test  real handshake, max_idle_timeout a truncated varint
    198.18.1.43  broken-short-token short-token.lab.test real handshake, 15-byte stateless_reset_token
    198.18.1.60  quinn              quinn.lab.test      quinn 0.11 (lab/servers/quinn)
    198.18.1.61  quiche             quiche.lab.test     quiche 0.30 (lab/servers/quiche)
    198.18.1.62  s2n-quic           s2n-quic.lab.test   s2n-quic 1.91 (lab/servers/s2n-quic)
    198.18.1.63  tquic              tquic.lab.test      tquic 1.6 (lab/servers/tquic)
    198.18.1.64  msquic             msquic.lab.test     msquic 2.5.1 (lab/servers/msquic)
    198.18.1.70  kwik               kwik.lab.test       kwik + flupke (Java), lab/servers/kwik
    198.18.1.71  netty              netty.lab.test      netty-incubator-codec-quic (quiche via JNI), Retry always
    198.18.1.72  qh3                qh3.lab.test        qh3 (aioquic's fork, Rust core), lab/qh3_server.py
    198.18.1.73  lsquic             lsquic.lab.test     LSQUIC's http_server, only where QREPLAY_LSQUIC_SERVER names one
    198.18.1.50  quic-go            quic-go.lab.test    quic-go (go.mod's), lab/servers/quic-go, once built
    198.18.1.51  x-net-quic         x-net-quic.lab.test Go's golang.org/x/net/quic, lab/servers/x-net-quic, once built
    198.18.1.74  picoquic           picoquic.lab.test   picoquic (aiopquic), lab/picoquic_server.py, once set up
    198.18.1.100 udp-closed host    closed.lab.test
    198.18.1.240-255 silent (routed to a blackhole in the core)
    198.18.1.53  the lab's resolver dns.lab.test       lab/dns_server.py (dnspython), UDP 53, zone LAB_ZONE below
    Reserved for later kinds: 198.18.1.52, 198.18.1.54-59,
    198.18.1.80 (the discovery benchmark's range server, lab/discovery_lab.py).

Any other address of 198.18.1.0/24 is not silent: ARP fails in the core, which then answers
ICMP host unreachable (after about 3 s).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from common.setfiles import builtin_set

LAB_DOMAIN = "lab.test"
RESOLVER_IP = "198.18.1.53"  # the default lab's DNS server (`qscan domains --resolver`)


def _d(label: str) -> str:
    return f"{label}.{LAB_DOMAIN}."


# What the lab's resolver serves. Evidence each domain should yield (`qscan domains`):
#   alpha, aioquic: HTTPS record with alpn h3 (and A)
#   caddy: only an A record; caddy's Alt-Svc over HTTPS/TCP says h3
#   other.caddy: HTTPS record alpn h3 to caddy's address, but caddy has no
#     site (certificate) for that name: the same address gives an SNI-dependent result
#   beta: A only, no TCP service: no QUIC evidence
#   closed: HTTPS record alpn h3 pointing at the UDP-closed host
#   missing: not in the zone (NXDOMAIN)
LAB_ZONE: dict[str, dict[str, list[str]]] = {
    _d("alpha"): {"A": ["198.18.1.10"], "HTTPS": ["1 . alpn=h3"]},
    _d("beta"): {"A": ["198.18.1.11"]},
    _d("caddy"): {"A": ["198.18.1.20"]},
    _d("other.caddy"): {"A": ["198.18.1.20"], "HTTPS": ["1 . alpn=h3"]},
    _d("aioquic"): {"A": ["198.18.1.30"], "HTTPS": ['1 . alpn="h3,h2" port=443 ipv4hint=198.18.1.30']},
    _d("closed"): {"A": ["198.18.1.100"], "HTTPS": ["1 . alpn=h3"]},
}
LAB_DOMAINS: tuple[str, ...] = tuple(name.rstrip(".") for name in LAB_ZONE) + (f"missing.{LAB_DOMAIN}",)


IPV6_RANGE = "2001:2::/48"
IPV6_PREFIXLEN = 64


def ipv6_of(ipv4: str) -> str:
    """The lab's IPv6 twin of a lab IPv4 address: 198.18.A.B -> 2001:2:0:A::B, the decimal
    digits read as hex so that the two stay recognisably the same host."""
    *_, subnet, host = ipv4.split(".")
    return str(ipaddress.IPv6Address(f"2001:2:0:{subnet}::{host}"))


@dataclass(frozen=True)
class ServerSpec:
    """One server to run: ``kind`` names a registered ServerKind; ``options``
    are that kind's own settings (e.g. transport parameters, a mode)."""

    name: str
    kind: str
    ip: str
    port: int = 443
    sni: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    #: a server whose library this machine may lack (an LSQUIC build of the user's, say): the lab runs it
    #: where its kind can run and leaves it out elsewhere (lab.kinds.runnable), instead of refusing to start
    optional: bool = False

    @property
    def ip6(self) -> str:
        return ipv6_of(self.ip)

    @property
    def server_name(self) -> str:
        return self.sni or f"{self.name}.{LAB_DOMAIN}"


@dataclass(frozen=True)
class Topology:
    servers: tuple[ServerSpec, ...]
    client_ip: str = "198.18.0.2"
    core_client_ip: str = "198.18.0.1"
    client_prefixlen: int = 24
    core_server_ip: str = "198.18.1.1"
    server_prefixlen: int = 24
    lab_range: str = "198.18.0.0/15"
    closed_hosts: tuple[str, ...] = ("198.18.1.100",)
    silent_range: str = "198.18.1.240/28"
    silent_range6: str = "2001:2:0:1::240/123"
    lab_range6: str = IPV6_RANGE
    resolver: str | None = None  # a DNS server for LAB_ZONE at this address (UDP 53), or none

    def with_servers(self, *servers: ServerSpec) -> "Topology":
        return replace(self, servers=self.servers + servers)

    def addresses(self) -> dict[str, Any]:
        """The addresses as plain data, for state.json and ``lab status --json``."""
        return {
            "client": self.client_ip,
            "core_client_side": self.core_client_ip,
            "core_server_side": self.core_server_ip,
            "server_subnet": f"{self.core_server_ip.rsplit('.', 1)[0]}.0/{self.server_prefixlen}",
            "lab_range": self.lab_range,
            "closed_hosts": list(self.closed_hosts),
            "silent_range": self.silent_range,
            "resolver": self.resolver,
            "client6": ipv6_of(self.client_ip),
            "core_server_side6": ipv6_of(self.core_server_ip),
            "lab_range6": self.lab_range6,
            "silent_range6": self.silent_range6,
        }


def default_topology() -> Topology:
    """Every server of the default lab, the optional ones included (lab.kinds.runnable keeps those this
    machine can run)."""
    optional = (ServerSpec("lsquic", "lsquic", "198.18.1.73", optional=True),
                ServerSpec("quic-go", "quic-go", "198.18.1.50", optional=True),
                ServerSpec("x-net-quic", "x-net-quic", "198.18.1.51", optional=True),
                ServerSpec("picoquic", "picoquic", "198.18.1.74", optional=True))
    return Topology(
        servers=(
            ServerSpec("ngtcp2-alpha", "ngtcp2", "198.18.1.10", sni=f"alpha.{LAB_DOMAIN}",
                       options={"parameter_set": "alpha", "parameters": builtin_set("alpha").as_sent()}),
            ServerSpec("ngtcp2-beta", "ngtcp2", "198.18.1.11", sni=f"beta.{LAB_DOMAIN}",
                       options={"parameter_set": "beta", "parameters": builtin_set("beta").as_sent()}),
            ServerSpec("caddy", "caddy", "198.18.1.20"),
            ServerSpec("aioquic", "aioquic", "198.18.1.30"),
            ServerSpec("quinn", "quinn", "198.18.1.60"),
            ServerSpec("quiche", "quiche", "198.18.1.61"),
            ServerSpec("s2n-quic", "s2n-quic", "198.18.1.62"),
            ServerSpec("tquic", "tquic", "198.18.1.63"),
            ServerSpec("msquic", "msquic", "198.18.1.64"),
            ServerSpec("kwik", "kwik", "198.18.1.70"),
            ServerSpec("netty", "netty", "198.18.1.71"),
            ServerSpec("qh3", "qh3", "198.18.1.72"),
            ServerSpec("broken-garbage", "broken", "198.18.1.40", sni=f"garbage.{LAB_DOMAIN}",
                       options={"mode": "garbage"}),
            ServerSpec("broken-duplicate", "broken", "198.18.1.41", sni=f"duplicate.{LAB_DOMAIN}",
                       options={"mode": "duplicate-parameter"}),
            ServerSpec("broken-truncated", "broken", "198.18.1.42", sni=f"truncated.{LAB_DOMAIN}",
                       options={"mode": "truncated-varint"}),
            ServerSpec("broken-short-token", "broken", "198.18.1.43", sni=f"short-token.{LAB_DOMAIN}",
                       options={"mode": "short-reset-token"}),
            *optional,
        ),
        resolver=RESOLVER_IP,
    )
