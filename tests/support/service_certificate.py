"""A serving pair for an in-cluster Service name only, signed by a CA of its own: what the
chart's `genCA`/`genSignedCert` give the artifact endpoint, so a test connecting to 127.0.0.1
meets the certificate a user behind `kubectl port-forward` meets."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=1)


def _certificate(subject: str, issuer: str, public_key, signing_key, extensions) -> bytes:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signing_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def _key_usage(*, certificates: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=certificates,
        crl_sign=certificates,
        encipher_only=False,
        decipher_only=False,
    )


def issue_service_certificate(out_dir: Path, dns_names: list[str]) -> Path:
    """Write ``ca.crt``, ``tls.crt`` and ``tls.key`` into `out_dir`: a fresh CA and a serving
    certificate it signs for `dns_names` and no address. Returns `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    key = ec.generate_private_key(ec.SECP256R1())
    ca_name = "stepscope-test-ca"
    # Key usage and key identifiers too, so OpenSSL's strict checks (Python 3.13's default)
    # accept the chain as they accept the chart's.
    ca = [
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (_key_usage(certificates=True), True),
        (x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False),
    ]
    (out_dir / "ca.crt").write_bytes(
        _certificate(ca_name, ca_name, ca_key.public_key(), ca_key, ca)
    )
    serving = [
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (_key_usage(certificates=False), True),
        (x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        (x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), False),
    ]
    (out_dir / "tls.crt").write_bytes(
        _certificate(dns_names[0], ca_name, key.public_key(), ca_key, serving)
    )
    (out_dir / "tls.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return out_dir
