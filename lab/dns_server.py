"""A small authoritative DNS server for lab domains (dnspython), UDP only.

Zone: a JSON file ``{"name.": {"A": ["198.18.1.10"], "HTTPS": ["1 . alpn=h3"]}}``
(record data in presentation format). Names in the zone answer NOERROR
(empty when the type is absent), others NXDOMAIN. A datagram that is not a
DNS message gets FORMERR, as real servers answer, which is also what tells the
lab's readiness probe the server is up.

    python -m lab.dns_server 198.18.1.53:53 --zone zone.json
"""

from __future__ import annotations

import json
import socket

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rrset

from tparams import program_cli

TTL = 60


def load_zone(data: dict[str, dict[str, list[str]]]) -> dict[dns.name.Name, dict[int, dns.rrset.RRset]]:
    zone: dict[dns.name.Name, dict[int, dns.rrset.RRset]] = {}
    for owner, records in data.items():
        name = dns.name.from_text(owner)
        zone[name] = {
            dns.rdatatype.from_text(rdtype): dns.rrset.from_text_list(name, TTL, "IN", rdtype, texts)
            for rdtype, texts in records.items()
        }
    return zone


def answer(wire: bytes, zone: dict[dns.name.Name, dict[int, dns.rrset.RRset]]) -> bytes | None:
    try:
        query = dns.message.from_wire(wire)
    except dns.exception.DNSException:
        if len(wire) < 2:
            return None
        # Header only: the query's id, QR set, rcode FORMERR.
        return wire[:2] + bytes([0x80, dns.rcode.FORMERR]) + bytes(8)
    response = dns.message.make_response(query)
    response.flags |= dns.flags.AA
    for question in query.question:
        records = zone.get(question.name)
        if records is None:
            response.set_rcode(dns.rcode.NXDOMAIN)
        elif question.rdtype in records:
            response.answer.append(records[question.rdtype])
    return response.to_wire()


def main() -> None:
    args = program_cli.parser("resolver", __doc__.splitlines()[0]).parse_args()
    with open(args.zone) as handle:
        zone = load_zone(json.load(handle))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(args.listen)
    while True:
        wire, peer = sock.recvfrom(65535)
        reply = answer(wire, zone)
        if reply is not None:
            sock.sendto(reply, peer)


if __name__ == "__main__":
    main()
