"""Certificates and keys for one local control plane instance.

One throw-away CA signs the API server's serving certificate and the client
certificates of the admin and the controller manager; a separate RSA key pair
signs service-account tokens. Everything is written under the instance's
directory and never leaves it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=30)


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    controller_manager_cert: Path
    controller_manager_key: Path
    service_account_key: Path
    service_account_pub: Path
    webhook_client_cert: Path
    webhook_client_key: Path


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _write_key(key, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _issue(
    subject: x509.Name,
    key,
    ca_key,
    ca_name: x509.Name,
    *,
    is_ca: bool = False,
    usages: list | None = None,
    sans: list | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if is_ca:
        builder = builder.add_extension(
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
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def create_pki(directory: Path, extra_server_ips: tuple[str, ...] = ()) -> Pki:
    """Write a CA, serving and client certificates and service-account keys.

    ``extra_server_ips`` are more addresses the API server is reached at besides 127.0.0.1:
    a real node's bridge address, where its pods reach it (stepscope_dev.realnode)."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(
        *(
            directory / name
            for name in (
                "ca.crt",
                "ca.key",
                "apiserver.crt",
                "apiserver.key",
                "admin.crt",
                "admin.key",
                "controller-manager.crt",
                "controller-manager.key",
                "sa.key",
                "sa.pub",
                "apiserver-webhook-client.crt",
                "apiserver-webhook-client.key",
            )
        )
    )
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("stepscope-local-ca")
    _write_key(ca_key, pki.ca_key)
    _write_cert(_issue(ca_name, ca_key, ca_key, ca_name, is_ca=True), pki.ca_cert)

    serving_key = ec.generate_private_key(ec.SECP256R1())
    sans = [
        x509.DNSName(name)
        for name in (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", *extra_server_ips)]
    _write_key(serving_key, pki.serving_key)
    _write_cert(
        _issue(
            _name("kube-apiserver"),
            serving_key,
            ca_key,
            ca_name,
            usages=[ExtendedKeyUsageOID.SERVER_AUTH],
            sans=sans,
        ),
        pki.serving_cert,
    )

    # The admin is in system:masters, which RBAC always allows; the controller
    # manager gets its own identity so its bootstrap RBAC roles apply. The API server
    # presents the last one to admission webhooks (its AdmissionConfiguration), so a
    # webhook that requires client certificates knows the call comes from the API server.
    for cert_path, key_path, subject in (
        (pki.webhook_client_cert, pki.webhook_client_key, _name("kube-apiserver-webhook-client")),
        (pki.admin_cert, pki.admin_key, _name("stepscope-admin", "system:masters")),
        (
            pki.controller_manager_cert,
            pki.controller_manager_key,
            _name("system:kube-controller-manager"),
        ),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        _write_key(key, key_path)
        _write_cert(
            _issue(subject, key, ca_key, ca_name, usages=[ExtendedKeyUsageOID.CLIENT_AUTH]),
            cert_path,
        )

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(sa_key, pki.service_account_key)
    pki.service_account_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


def issue_loopback_serving_cert(pki_dir: Path, out_dir: Path, common_name: str) -> Path:
    """Sign a serving certificate for 127.0.0.1 with the instance's CA into ``out_dir``.

    Webhook servers in the local control plane listen on loopback and are registered with
    their URL, so the API server checks this certificate against the CA it already trusts.
    The files are named ``tls.crt`` and ``tls.key``, as controller-runtime's webhook server
    expects in its certificate directory. Returns ``out_dir``.
    """
    ca_cert = x509.load_pem_x509_certificate((pki_dir / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki_dir / "ca.key").read_bytes(), password=None)
    out_dir.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    _write_key(key, out_dir / "tls.key")
    _write_cert(
        _issue(
            _name(common_name),
            key,
            ca_key,
            ca_cert.subject,
            usages=[ExtendedKeyUsageOID.SERVER_AUTH],
            sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
        ),
        out_dir / "tls.crt",
    )
    return out_dir


def issue_signed_cert(
    pki_dir: Path,
    cert_path: Path,
    key_path: Path,
    common_name: str,
    *,
    organization: str | None = None,
    server_ips: tuple[str, ...] = (),
) -> None:
    """Sign a client certificate (or, with ``server_ips``, a serving one for those addresses)
    with the instance's CA: the identities of the real node's kubelet and scheduler."""
    ca_cert = x509.load_pem_x509_certificate((pki_dir / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki_dir / "ca.key").read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_ips else ExtendedKeyUsageOID.CLIENT_AUTH
    sans = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips] or None
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    _write_key(key, key_path)
    _write_cert(
        _issue(
            _name(common_name, organization),
            key,
            ca_key,
            ca_cert.subject,
            usages=[usage],
            sans=sans,
        ),
        cert_path,
    )
