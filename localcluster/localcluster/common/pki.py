"""Certificates and keys for the local cluster, made with `cryptography`.

Layout under ``<state>/pki/``: ``ca.{crt,key}``, ``apiserver.{crt,key}``,
``admin.{crt,key}``, ``controller-manager.{crt,key}``, ``scheduler.{crt,key}``,
``apiserver-kubelet-client.{crt,key}``, ``sa.{key,pub}`` and per node
``node-<name>.{crt,key}`` (client, CN=system:node:<name>) and
``node-<name>-serving.{crt,key}`` (the node agent's HTTPS endpoint).

Keys are ECDSA P-256 (fast to make); the service-account signing key is RSA 2048.
Every function is idempotent: an existing file pair is kept.
"""
from __future__ import annotations

import datetime as _dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY_DAYS = 3650
APISERVER_SANS_DNS = [
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
]
APISERVER_SANS_IP = ["127.0.0.1", "10.96.0.1", "::1"]


def _write_key(path: Path, key, fmt=serialization.PrivateFormat.PKCS8) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption()))
    path.chmod(0o600)


def _load_key(path: Path):
    return serialization.load_pem_private_key(path.read_bytes(), password=None)


def _name(cn: str, orgs: list[str] | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in (orgs or [])]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def ensure_ca(pki: Path, cn: str = "disttrain-localcluster-ca",
              dns: list[str] | None = None, rsa_pkcs1: bool = False) -> tuple[Path, Path]:
    """Create a CA (``ca.{crt,key}``) in ``pki`` unless it exists: the cluster CA by
    default; ``cn``/``dns`` name another one, and ``rsa_pkcs1`` gives it an RSA 2048 key
    in PKCS#1 PEM instead of ECDSA P-256 (the training operator's webhook CA: its cert
    rotator parses only that, and wants the CA's name as a DNS SAN).

    Returns (cert path, key path). Raises OSError if ``pki`` is not writable.
    """
    pki.mkdir(parents=True, exist_ok=True)
    crt, key_path = pki / "ca.crt", pki / "ca.key"
    if crt.exists() and key_path.exists():
        return crt, key_path
    key = (rsa.generate_private_key(public_exponent=65537, key_size=2048) if rsa_pkcs1
           else ec.generate_private_key(ec.SECP256R1()))
    now = _dt.datetime.now(_dt.timezone.utc)
    name = _name(cn)
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(hours=1))
        .not_valid_after(now + _dt.timedelta(days=VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if dns:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]),
                            critical=False)
    cert = b.sign(key, hashes.SHA256())
    _write_key(key_path, key, serialization.PrivateFormat.TraditionalOpenSSL if rsa_pkcs1
               else serialization.PrivateFormat.PKCS8)
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return crt, key_path


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def ensure_cert(
    pki: Path,
    stem: str,
    cn: str,
    orgs: list[str] | None = None,
    *,
    serving: list[str] | None = None,
) -> tuple[Path, Path]:
    """Create ``<pki>/<stem>.{crt,key}`` signed by the CA unless both exist.

    ``cn``/``orgs`` become the subject (Kubernetes user name / groups for client certs).
    A client cert without ``serving``; with it, a serving cert (server auth only) whose
    subject alternative names are those names: the DNS names first, then the IP addresses.
    Returns (cert path, key path). Raises FileNotFoundError if the CA is missing.
    """
    names = serving or []
    ips = [n for n in names if _is_ip(n)]
    dns = [n for n in names if not _is_ip(n)]
    client, server = serving is None, serving is not None
    crt, key_path = pki / f"{stem}.crt", pki / f"{stem}.key"
    if crt.exists() and key_path.exists():
        return crt, key_path
    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = _load_key(pki / "ca.key")
    key = ec.generate_private_key(ec.SECP256R1())
    now = _dt.datetime.now(_dt.timezone.utc)
    usages = []
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, orgs))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(hours=1))
        .not_valid_after(now + _dt.timedelta(days=VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_encipherment=True, key_cert_sign=False,
                crl_sign=False, content_commitment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in (dns or [])]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in (ips or [])]
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = b.sign(ca_key, hashes.SHA256())
    _write_key(key_path, key)
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return crt, key_path


def ensure_sa_keypair(pki: Path) -> tuple[Path, Path]:
    """Create the service-account token signing key pair (RSA 2048) unless it exists.

    Returns (private key path ``sa.key``, public key path ``sa.pub``).
    """
    key_path, pub = pki / "sa.key", pki / "sa.pub"
    if key_path.exists() and pub.exists():
        return key_path, pub
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(key_path, key)
    pub.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return key_path, pub


def ensure_control_plane_pki(pki: Path) -> None:
    """Create the CA, the apiserver serving cert, the control-plane client certs and the
    service-account key pair (each only if missing)."""
    ensure_ca(pki)
    ensure_cert(pki, "apiserver", "kube-apiserver", serving=[*APISERVER_SANS_DNS, *APISERVER_SANS_IP])
    ensure_cert(pki, "admin", "admin", ["system:masters"])
    ensure_cert(pki, "controller-manager", "system:kube-controller-manager")
    ensure_cert(pki, "scheduler", "system:kube-scheduler")
    ensure_cert(pki, "apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                ["kubeadm:cluster-admins"])
    ensure_cert(pki, "front-proxy-client", "front-proxy-client")
    ensure_sa_keypair(pki)


def ensure_node_pki(pki: Path, node: str, internal_ip: str) -> dict[str, Path]:
    """Create the node's client cert (CN=system:node:<node>, O=system:nodes) and its
    serving cert (SANs: node name, localhost, 127.0.0.1, ``internal_ip``).

    Returns a dict with keys client_crt, client_key, serving_crt, serving_key.
    """
    c, k = ensure_cert(pki, f"node-{node}", f"system:node:{node}", ["system:nodes"])
    sc, sk = ensure_cert(pki, f"node-{node}-serving", f"system:node:{node}", ["system:nodes"],
                         serving=[node, "localhost", "127.0.0.1", internal_ip])
    return {"client_crt": c, "client_key": k, "serving_crt": sc, "serving_key": sk}


def install_pair(crt: Path, key: Path, target: Path) -> None:
    """Copy a certificate and its key to ``target``/tls.crt and ``target``/tls.key (mode
    0600; the directory is created), where a server reads them; an unchanged file is left
    alone. Raises OSError."""
    target.mkdir(parents=True, exist_ok=True)
    for src, name in ((crt, "tls.crt"), (key, "tls.key")):
        data = src.read_bytes()
        f = target / name
        if not f.exists() or f.read_bytes() != data:
            f.write_bytes(data)
            f.chmod(0o600)
