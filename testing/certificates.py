"""Certificates made on the spot, for tests of TLS: a certificate authority and a server certificate it signs.

With ``cryptography`` (installed with the MCP SDK, through ``pyjwt[crypto]``): no ``openssl``
command, no file shipped. Keys are EC P-256, valid for a day.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_FOR = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Authority:
    """A certificate authority: ``certificate`` is the PEM file a client trusts (libpq's ``sslrootcert``)."""

    certificate: Path
    key: ec.EllipticCurvePrivateKey
    name: x509.Name


@dataclass(frozen=True)
class ServerCertificate:
    certificate: Path  # PEM
    key: Path  # PEM, mode 0600


def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def make_authority(directory: Path, common_name: str) -> Authority:
    """A self-signed CA, its certificate written to ``directory/<common_name>.pem``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{common_name}.pem"
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return Authority(path, key, name)


def issue_server_certificate(authority: Authority, directory: Path, *, hosts: tuple[str, ...] = ("localhost",),
                             addresses: tuple[str, ...] = ("127.0.0.1",)) -> ServerCertificate:
    """A server certificate signed by ``authority`` for the names ``hosts`` and the IP ``addresses``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    names: list[x509.GeneralName] = [x509.DNSName(host) for host in hosts]
    names += [x509.IPAddress(ipaddress.ip_address(address)) for address in addresses]
    authority_key = authority.key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (hosts or addresses)[0])]))
        .issuer_name(authority.name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(authority_key), critical=False)
        .sign(authority.key, hashes.SHA256())
    )
    certificate_path = directory / "server.pem"
    certificate_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path = directory / "server.key"
    _write_private(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return ServerCertificate(certificate_path, key_path)
