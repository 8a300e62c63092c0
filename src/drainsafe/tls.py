"""A throw-away CA and one server certificate signed by it, made with `cryptography`.

One home for the certificates drainsafe makes for itself: the lab's API server
(drainsafe.lab.apiserver.tls: kubectl and the clients verify it against the kubeconfig's
certificate-authority) and the eviction guard's webhook (drainsafe.controller.certs: the
API server verifies it against the webhook configuration's caBundle). Names go in the
subjectAltName, as both verifiers require (Go's crypto/x509 ignores the common name).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class ServingCert:
    """PEM bytes: the CA certificate (what a client trusts), the server's certificate and key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def not_after(self) -> dt.datetime:
        return x509.load_pem_x509_certificate(self.cert_pem).not_valid_after_utc


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _alt_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def issue(names: Sequence[str], *, ca_name: str, server_name: str, days: int,
          now: dt.datetime | None = None) -> ServingCert:
    """A new CA, and a server certificate for `names` (DNS names or IP addresses) signed
    by it, valid from five minutes before `now` (clock skew) for `days`."""
    start = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(minutes=5)
    until = start + dt.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name(ca_name))
        .issuer_name(_name(ca_name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    unique = list(dict.fromkeys(names))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(server_name))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(until)
        .add_extension(x509.SubjectAlternativeName([_alt_name(n) for n in unique]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCert(
        ca.public_bytes(serialization.Encoding.PEM),
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption()))
