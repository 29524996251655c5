"""The agent's authority and certificates: ECDSA P-256, issued in memory (pure: no I/O).

The adapter keeps one authority (a CA certificate and its key) per owner. It signs the
agent's certificate (server only, naming the address the host dials, 90 days) and the
host's client certificate (client only, 90 days); both are issued again after 30 days, so
neither is ever close to its end. The CA's key never leaves the host: the agent gets its own
certificate and key and the CA certificates it trusts for clients.
"""

from __future__ import annotations

import datetime as dt
import ipaddress

import attrs
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CA_LIFETIME",
    "LEAF_LIFETIME",
    "RENEW_AFTER",
    "Authority",
    "Issued",
    "certificates_in",
]

CA_LIFETIME = dt.timedelta(days=3650)
LEAF_LIFETIME = dt.timedelta(days=90)
RENEW_AFTER = dt.timedelta(days=30)
"""A leaf older than this is issued again (the agent's in place, the host's at its next use)."""
_SKEW = dt.timedelta(minutes=5)
"""Leaves start a little in the past: a peer whose clock is behind still accepts them."""


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pando-runtime"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def certificates_in(pem: str) -> list[x509.Certificate]:
    """The certificates of a PEM text; ``ValueError`` when it holds none or a bad one."""
    try:
        found = x509.load_pem_x509_certificates(pem.encode())
    except ValueError:
        raise ValueError("not PEM certificates") from None
    if not found:
        raise ValueError("holds no certificate")
    return found


@attrs.frozen(kw_only=True)
class Issued:
    """A certificate and its key, as PEM, with the time it should be issued again."""

    cert_pem: str
    key_pem: str = attrs.field(repr=False)
    renew_at: dt.datetime


@attrs.frozen(kw_only=True)
class Authority:
    """A CA certificate with its key; signs the agent's and the host's certificates."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey = attrs.field(repr=False)

    @classmethod
    def generate(cls, owner: str, now: dt.datetime | None = None) -> Authority:
        """A new authority for ``owner``: ECDSA P-256, ten years."""
        now = now or dt.datetime.now(dt.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(f"pando agent authority ({owner})")
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _SKEW)
            .not_valid_after(now + CA_LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        return cls(cert=cert, key=key)

    @classmethod
    def from_pem(cls, text: str) -> Authority:
        """The authority in a PEM text holding its certificate and its (unencrypted) key.

        Raises:
            ValueError: What is wrong, in words that never quote the key.
        """
        cert = certificates_in(text)[0]
        try:
            key = serialization.load_pem_private_key(text.encode(), password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            raise ValueError("holds no unencrypted private key") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the key is not an ECDSA key")  # noqa: TRY004 - a bad setting
        if key.public_key() != cert.public_key():
            raise ValueError("the key is not the certificate's")
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        if not constraints.ca:
            raise ValueError("the certificate is not a CA's")
        return cls(cert=cert, key=key)

    @property
    def cert_pem(self) -> str:
        """The CA certificate (public: hosts and agents trust it)."""
        return _pem(self.cert)

    def to_pem(self) -> str:
        """Certificate and key, as the CA file holds them (a secret)."""
        return self.cert_pem + _key_pem(self.key)

    def _leaf(
        self,
        common_name: str,
        usage: x509.ObjectIdentifier,
        names: list[x509.GeneralName],
        now: dt.datetime | None,
    ) -> Issued:
        now = now or dt.datetime.now(dt.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _SKEW)
            .not_valid_after(now + LEAF_LIFETIME)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Issued(cert_pem=_pem(cert), key_pem=_key_pem(key), renew_at=now + RENEW_AFTER)

    def issue_agent(self, address: str, now: dt.datetime | None = None) -> Issued:
        """The agent's certificate: a server's, naming ``address`` (an IP or a DNS name)."""
        try:
            name: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(address))
        except ValueError:
            name = x509.DNSName(address)
        return self._leaf(f"pando agent {address}", ExtendedKeyUsageOID.SERVER_AUTH, [name], now)

    def issue_host(self, owner: str, now: dt.datetime | None = None) -> Issued:
        """The host's client certificate (no name: the agent checks only who issued it)."""
        return self._leaf(f"pando host ({owner})", ExtendedKeyUsageOID.CLIENT_AUTH, [], now)
