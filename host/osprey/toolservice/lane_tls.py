"""Certificates made for one lane on another machine: its sidecar serves TLS with them, and the
broker trusts nothing else.

    pki = make_lane_pki("osprey-lane-1a2b")
    # the lane gets pki.server_cert_pem, pki.server_key_pem and pki.ca_pem (to check the broker's certificate)
    target = pki.target("build-1.example", 49153)  # pinned to this lane's CA, with the broker's client certificate

Each lane gets its own CA. Its key signs the sidecar's certificate and the broker's client
certificate and goes with the call that made them (it is never written anywhere), so no other certificate can ever
chain to it: trusting that CA is pinning this lane. The sidecar's certificate names the lane
(`SERVER_NAME_SUFFIX`), not an address, since the engine's host chooses where its port is
published; the broker checks that name. The keys are P-256 (fast to make: about a millisecond).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from pydantic import SecretBytes

from .targets import TlsTarget

SERVER_NAME_SUFFIX = ".lane.osprey.invalid"  # `.invalid` is reserved: the name never resolves to anything
VALID_FOR = datetime.timedelta(days=30)
_CLOCK_SKEW = datetime.timedelta(hours=1)  # the engine's host may run a little behind this one


@dataclass(frozen=True)
class LanePki:
    """A lane's certificates (PEM)."""

    server_name: str
    ca_pem: bytes
    server_cert_pem: bytes
    server_key_pem: bytes = field(repr=False)
    client_cert_pem: bytes = field(repr=False)
    client_key_pem: bytes = field(repr=False)

    def target(self, host: str, port: int) -> TlsTarget:
        """The lane's ToolService at `host:port`: its certificate checked against this lane's CA
        and name, the broker's client certificate presented (mutual TLS)."""
        return TlsTarget(host=host, port=port, ca_pem=self.ca_pem, client_cert_pem=self.client_cert_pem,
                         client_key_pem=SecretBytes(self.client_key_pem), server_name=self.server_name)


def make_lane_pki(lane_name: str) -> LanePki:
    """New certificates for the lane `lane_name` (letters, digits, `-`)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not lane_name or len(lane_name) > 63 or not all(c.isascii() and (c.isalnum() or c == "-") for c in lane_name):
        raise ValueError(f"{lane_name!r} is not a lane name (1-63 letters, digits and hyphens)")
    server_name = lane_name.lower() + SERVER_NAME_SUFFIX
    now = datetime.datetime.now(datetime.UTC)

    def key() -> ec.EllipticCurvePrivateKey:
        return ec.generate_private_key(ec.SECP256R1())

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Osprey lane"), x509.NameAttribute(NameOID.COMMON_NAME, common)])

    ca_key = key()
    ca_name = name(f"{lane_name} CA")
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - _CLOCK_SKEW).not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
                       critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def issue(common: str, usage: x509.ObjectIdentifier, san: x509.GeneralName) -> tuple[bytes, bytes]:
        leaf_key = key()
        cert = (
            x509.CertificateBuilder().subject_name(name(common)).issuer_name(ca_name).public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - _CLOCK_SKEW).not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        key_pem = leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        return cert.public_bytes(serialization.Encoding.PEM), key_pem

    server_cert, server_key = issue(server_name, ExtendedKeyUsageOID.SERVER_AUTH, x509.DNSName(server_name))
    client_cert, client_key = issue(f"broker for {lane_name}", ExtendedKeyUsageOID.CLIENT_AUTH, x509.DNSName(f"broker.{server_name}"))
    return LanePki(server_name=server_name, ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM), server_cert_pem=server_cert,
                   server_key_pem=server_key, client_cert_pem=client_cert, client_key_pem=client_key)
