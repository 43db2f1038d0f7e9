"""A throwaway certificate authority for TLS tests, generated at test time.

Nothing is checked in: each test gets fresh keys in its own folder, so no
certificate ever expires under the suite and no private key lives in the repository.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertPair", "TestCA"]

_LIFETIME = datetime.timedelta(days=1)


@dataclass(frozen=True)
class CertPair:
    cert_file: str
    key_file: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, *, ca: bool
) -> x509.CertificateBuilder:
    """What every test certificate has: valid from a few minutes ago (clocks differ a
    little) for :data:`_LIFETIME`, a CA or not."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _LIFETIME)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )


class TestCA:
    """A CA in ``folder``; :meth:`issue` signs server or client certificates."""

    __test__ = False  # not a pytest test class

    def __init__(self, folder: Path, name: str = "streamwal test CA") -> None:
        self._folder = folder
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._cert = (
            _builder(_name(name), _name(name), self._key, ca=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = str(folder / f"{name.replace(' ', '-')}.pem")
        Path(self.ca_file).write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, server: bool, client: bool) -> CertPair:
        """A certificate for 127.0.0.1 and localhost, usable as server and/or client."""
        key = ec.generate_private_key(ec.SECP256R1())
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        cert = (
            _builder(_name(name), self._cert.subject, key, ca=False)
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        pair = CertPair(str(self._folder / f"{name}.pem"), str(self._folder / f"{name}-key.pem"))
        Path(pair.cert_file).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, Path(pair.key_file))
        return pair
