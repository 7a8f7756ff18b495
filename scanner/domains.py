"""`qscan domains` as a library call: which domains speak QUIC, and why we think so.

Two kinds of evidence lead to a handshake target (domain, address, port):
an HTTPS DNS record whose ALPN list holds h3 (RFC 9460; the record itself
says the origin speaks HTTP/3), and an ``Alt-Svc: h3=...`` header on the
domain's HTTPS-over-TCP answer (RFC 7838). A and AAAA records, and failures,
are stored as evidence too, so a notebook can tell "no QUIC" from "not
resolvable". Every handshake then sends the domain as SNI, so one address
behind several names yields one result per name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import ipaddress
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import dns.exception
import dns.resolver
import dns.rdtypes.svcbbase as svcb
import httpx
import pyarrow as pa

from tparams.errors import ToolError

from scanner.scan import scan_into
from scanner.discovery.ipv4 import open_discovery_store
from scanner.discovery.netinfo import require_namespace
from scanner.engine import ScanSettings
from common.netns import in_namespace
from scanner.store import ScanStore
from scanner.targets import BadLine, Target, read_lines

A_RECORD, AAAA_RECORD, HTTPS_RECORD, ALT_SVC = "a-record", "aaaa-record", "https-record", "alt-svc"
DNS_ERROR, ALT_SVC_ERROR = "dns-error", "alt-svc-error"
QUIC_EVIDENCE = (HTTPS_RECORD, ALT_SVC)
# h3 and the draft versions browsers advertised before RFC 9114.
_H3 = re.compile(r"^h3(-\d+)?$")
_ALT_SVC_ENTRY = re.compile(r'\s*([^=\s]+)\s*=\s*"([^"]*)"')
_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")


@dataclass(frozen=True)
class Evidence:
    domain: str
    evidence: str
    ip: str | None = None
    port: int | None = None
    detail: str | None = None
    time: dt.datetime = dataclasses.field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))


def parse_domain(text: str) -> str:
    """A domain as compared and asked for: lower case, no final dot; ValueError if it is none."""
    name = text.lower().rstrip(".")
    if not _DOMAIN.match(name):
        raise ValueError("not a domain name")
    return name


def read_domains(path: str | Path, strict: bool = False) -> tuple[list[str], list[BadLine]]:
    """One domain a line, ``#`` comments: the domains and the malformed lines, skipped as `qscan targets`
    skips its (with ``strict`` one rejects the file)."""
    return read_lines(str(path), parse_domain, "domain list", strict)


def refuse_held_scan(out: str | Path) -> None:
    """What scan_domains refuses about ``out``, said alone: before the domains are read and warned about."""
    if Path(out).exists():
        with open_discovery_store(out) as store:
            _refuse_held(store, out)


def _refuse_held(store: ScanStore, out: str | Path) -> None:
    if store.handshake_count() or store.con.execute("SELECT count(*) FROM domain_evidence").fetchall()[0][0]:
        raise ToolError(f"{out} already holds a scan; use a new --out")


def make_resolver(nameserver: str | None, timeout: float) -> dns.resolver.Resolver:
    if nameserver is None:
        resolver = dns.resolver.Resolver()
    else:
        try:
            ipaddress.ip_address(nameserver)
        except ValueError:
            raise ToolError(f"--resolver must be an IP address, not {nameserver!r}") from None
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = [nameserver]
    resolver.lifetime = timeout
    return resolver


def resolve(domain: str, resolver: dns.resolver.Resolver) -> list[Evidence]:
    """A, AAAA and HTTPS records of ``domain`` as evidence."""
    found: list[Evidence] = []
    addresses: list[str] = []
    for rdtype, kind in (("A", A_RECORD), ("AAAA", AAAA_RECORD), ("HTTPS", HTTPS_RECORD)):
        try:
            answer = resolver.resolve(domain, rdtype, raise_on_no_answer=False)
        except dns.resolver.NXDOMAIN:
            return [Evidence(domain, DNS_ERROR, detail="NXDOMAIN")]
        except (dns.exception.Timeout, dns.resolver.NoNameservers) as exc:
            found.append(Evidence(domain, DNS_ERROR, detail=f"{rdtype}: {type(exc).__name__}"))
            continue
        for rdata in answer.rrset or ():
            if kind == HTTPS_RECORD:
                found.extend(_https_record_evidence(domain, rdata, addresses))
            else:
                addresses.append(rdata.address)
                found.append(Evidence(domain, kind, ip=rdata.address, detail=rdata.to_text()))
    return found


def _https_record_evidence(domain: str, rdata, addresses: list[str]) -> list[Evidence]:
    alpn = rdata.params.get(svcb.ParamKey.ALPN)
    ids = [i.decode(errors="replace") for i in alpn.ids] if alpn else []
    if not any(_H3.match(i) for i in ids):
        return [Evidence(domain, HTTPS_RECORD, detail=rdata.to_text())]
    port_param = rdata.params.get(svcb.ParamKey.PORT)
    port = port_param.port if port_param else 443
    hints = rdata.params.get(svcb.ParamKey.IPV4HINT)
    # The A/AAAA records win over hints (RFC 9460 7.3); hints serve when there are none.
    ips = addresses or (list(hints.addresses) if hints else [])
    target = rdata.target.to_text().rstrip(".")
    if target and target != domain:
        # ServiceMode with another target name: its addresses are not resolved here.
        return [Evidence(domain, HTTPS_RECORD, port=port, detail=rdata.to_text())]
    return [Evidence(domain, HTTPS_RECORD, ip=ip, port=port, detail=rdata.to_text()) for ip in ips] or \
        [Evidence(domain, HTTPS_RECORD, port=port, detail=rdata.to_text())]


def parse_alt_svc(header: str) -> list[tuple[str, str | None, int]]:
    """(protocol, alternative host or None for the same host, port) of every entry."""
    entries = []
    for part in header.split(","):
        match = _ALT_SVC_ENTRY.match(part)
        if not match:
            continue
        protocol, authority = match.groups()
        host, _, port = authority.rpartition(":")
        if port.isdigit():
            entries.append((protocol, host or None, int(port)))
    return entries


def fetch_alt_svc(domain: str, ip: str, client: httpx.Client, port: int = 443) -> list[Evidence]:
    """GET https://domain/ from ``ip`` (SNI and Host = domain) and read Alt-Svc."""
    host = f"[{ip}]" if ":" in ip else ip
    try:
        response = client.get(f"https://{host}:{port}/", headers={"Host": domain},
                              extensions={"sni_hostname": domain})
    except httpx.HTTPError as exc:
        return [Evidence(domain, ALT_SVC_ERROR, ip=ip, port=port, detail=f"{type(exc).__name__}: {exc}"[:300])]
    header = ", ".join(response.headers.get_list("alt-svc"))
    found = []
    for protocol, alt_host, alt_port in parse_alt_svc(header):
        if _H3.match(protocol):
            # An alternative on another host is kept as evidence without an address.
            found.append(Evidence(domain, ALT_SVC, ip=None if alt_host else ip, port=alt_port, detail=header))
    return found


def gather_evidence(
    domains: Sequence[str],
    resolver: dns.resolver.Resolver,
    timeout: float,
    alt_svc: bool = True,
    on_domain: Callable[[], None] | None = None,
) -> list[Evidence]:
    evidence: list[Evidence] = []
    # Certificates are not checked: this gathers evidence of QUIC, it trusts nothing.
    with httpx.Client(verify=False, timeout=timeout, follow_redirects=False) as client:
        for domain in domains:
            found = resolve(domain, resolver)
            if alt_svc:
                for ip in dict.fromkeys(e.ip for e in found if e.evidence in (A_RECORD, AAAA_RECORD)):
                    found += fetch_alt_svc(domain, ip, client)
            evidence += found
            if on_domain:
                on_domain()
    return evidence


def quic_targets(evidence: Iterable[Evidence]) -> list[Target]:
    """One handshake target per (address, port, domain) with QUIC evidence."""
    targets = {Target(str(ipaddress.ip_address(e.ip)), e.port or 443, e.domain): None
               for e in evidence if e.evidence in QUIC_EVIDENCE and e.ip}
    return list(targets)


@dataclass
class DomainsResult:
    scan_id: int
    domains: int
    evidence: list[Evidence]
    targets: list[Target]
    handshakes_attempted: int = 0
    handshakes_ok: int = 0


def scan_domains(
    domains: Sequence[str],
    out: str | Path,
    settings: ScanSettings,
    nameserver: str | None = None,
    netns: str | None = None,
    alt_svc: bool = True,
    discover_only: bool = False,
    command_line: str | None = None,
    progress: bool = False,
    on_domain: Callable[[], None] | None = None,
) -> DomainsResult:
    require_namespace(netns)
    resolver = make_resolver(nameserver, settings.timeout)
    with open_discovery_store(out) as store:
        _refuse_held(store, out)
        scan_id = store.begin_scan("domains", {"resolver": nameserver, "alt_svc": alt_svc,
                                               "handshake": dataclasses.asdict(settings)}, command_line)
    with in_namespace(netns) if netns else contextlib.nullcontext():
        evidence = gather_evidence(domains, resolver, settings.timeout, alt_svc, on_domain)
    targets = quic_targets(evidence)
    with open_discovery_store(out) as store:
        store.append({"domain_evidence": _evidence_table(scan_id, evidence)})
        if discover_only:
            store.finish_scan(scan_id)
    result = DomainsResult(scan_id, len(domains), evidence, targets)
    if discover_only:
        return result
    with in_namespace(netns) if netns else contextlib.nullcontext():
        handshakes = scan_into(out, targets, settings, kind="domains", resume=True, command_line=command_line,
                               progress=progress)
    result.handshakes_attempted, result.handshakes_ok = handshakes.attempted, handshakes.ok
    return result


def _evidence_table(scan_id: int, evidence: list[Evidence]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"scan_id": scan_id, **dataclasses.asdict(e)} for e in evidence],
        schema=pa.schema([("scan_id", pa.int32()), ("domain", pa.string()), ("evidence", pa.string()),
                          ("ip", pa.string()), ("port", pa.int32()), ("detail", pa.string()),
                          ("time", pa.timestamp("us", tz="UTC"))]),
    )
