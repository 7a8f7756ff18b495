"""Throw-away certificates for the lab's servers and qreplay's: a self-signed one, made fresh at every lab `up`,
or a leaf signed by a throw-away CA (for clients that verify, such as the browsers: Firefox refuses a
self-signed certificate used as a leaf)."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def write_certificate(cert_path: Path, key_path: Path, dns_names: Iterable[str], ips: Iterable[str]) -> None:
    """An ECDSA P-256 certificate for ``dns_names`` and ``ips`` (every TLS
    stack in the lab accepts P-256; RSA would only slow `up` down)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("quictp lab")
    cert = (_builder(name, name, key, _sans(dns_names, ips))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    _write(cert_path, key_path, cert, key)


def write_signed_certificate(cert_path: Path, key_path: Path, ca_path: Path, dns_names: Iterable[str],
                             ips: Iterable[str]) -> None:
    """A P-256 leaf (server authentication) for ``dns_names`` and ``ips``, signed by a CA made for it
    alone and written to ``ca_path`` (its key is thrown away: it signs nothing else)."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("quictp lab CA")
    ca = (_builder(ca_name, ca_name, ca_key, [])
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    leaf = (_builder(_name("quictp lab server"), ca_name, key, _sans(dns_names, ips))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write(cert_path, key_path, leaf, key)
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _sans(dns_names: Iterable[str], ips: Iterable[str]) -> list[x509.GeneralName]:
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys(dns_names)]
    return sans + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in dict.fromkeys(ips)]


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey,
             sans: list[x509.GeneralName]) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(days=1))
               .not_valid_after(now + datetime.timedelta(days=30)))
    return builder.add_extension(x509.SubjectAlternativeName(sans), critical=False) if sans else builder


def _write(cert_path: Path, key_path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
