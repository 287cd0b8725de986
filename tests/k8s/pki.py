"""The certificates a throw-away Kubernetes control plane needs: a CA, the API server's serving certificate, an
admin client certificate (group system:masters) and the service-account signing key pair."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def make_pki(directory: Path, server_ips: tuple[str, ...] = ()) -> dict[str, Path]:
    """Write every file into ``directory``; returns name -> path (ca.crt, apiserver.crt/.key, admin.crt/.key,
    sa.key, sa.pub). ``server_ips`` are further addresses the API server's certificate must name."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    later = now + datetime.timedelta(days=2)
    ca_key = _key()
    ca = (x509.CertificateBuilder().subject_name(_name("raftmq-test-ca")).issuer_name(_name("raftmq-test-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(later)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, org: str | None, usage, sans: list[x509.GeneralName] | None = None):
        key = _key()
        b = (x509.CertificateBuilder().subject_name(_name(cn, org)).issuer_name(ca.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now).not_valid_after(later)
             .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return key, b.sign(ca_key, hashes.SHA256())

    server_sans = [x509.DNSName(n) for n in ("localhost", "kubernetes", "kubernetes.default",
                                             "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")]
    server_sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "10.96.0.1", *server_ips)]
    api_key, api_cert = leaf("kube-apiserver", None, ExtendedKeyUsageOID.SERVER_AUTH, server_sans)
    admin_key, admin_cert = leaf("admin", "system:masters", ExtendedKeyUsageOID.CLIENT_AUTH)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    paths = {n: directory / n for n in ("ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt",
                                         "admin.key", "sa.key", "sa.pub")}
    _write_cert(ca, paths["ca.crt"])
    _write_key(ca_key, paths["ca.key"])
    _write_cert(api_cert, paths["apiserver.crt"])
    _write_key(api_key, paths["apiserver.key"])
    _write_cert(admin_cert, paths["admin.crt"])
    _write_key(admin_key, paths["admin.key"])
    _write_key(sa_key, paths["sa.key"])
    paths["sa.pub"].write_bytes(sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                                 serialization.PublicFormat.SubjectPublicKeyInfo))
    return paths
