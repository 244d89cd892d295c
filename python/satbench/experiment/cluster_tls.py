"""Credentials for a Dask cluster's mutual TLS: a CA of the cluster's own and
a certificate and key for each role, in one folder.

    DIR/ca.pem                 the cluster's CA certificate (every member trusts it)
    DIR/ca.key                 its key, mode 0600 (kept only by :func:`make` with ``keep_ca_key``)
    DIR/scheduler.pem, .key    the scheduler's certificate and key (0600)
    DIR/worker.pem, .key       the workers'
    DIR/client.pem, .key       the coordinator's (``satbench run --scheduler``)

Dask checks that a peer's certificate chains to the CA on both ends of every
connection (``ssl.CERT_REQUIRED``), and nothing else: any certificate of this
CA may act in any role. Whoever holds one of these keys can send a worker
code to run, as root. ``satbench run --parallel`` makes a folder of its own
for the run (no CA key kept; removed when the run ends); ``satbench ca
--cluster DIR`` makes one to copy to the machines of a cluster
(docs/security.md). Keys are ECDSA P-256.

This CA is not the test CA of :mod:`satbench.endpoints.ca`, which signs the
testbed's servers for the browsers: the two never trust each other.
"""

from __future__ import annotations

import datetime
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: The roles Dask's TLS configuration names, each with a certificate of its own.
ROLES = ("scheduler", "worker", "client")


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """A file made here and now (never one planted before, never through a symlink), ``mode`` from
    its creation on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


@dataclass(frozen=True)
class ClusterTLS:
    """A folder of cluster credentials (see the module's docs)."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.pem"

    def cert(self, role: str) -> Path:
        return self.dir / f"{role}.pem"

    def key(self, role: str) -> Path:
        return self.dir / f"{role}.key"

    def config(self) -> dict[str, Any]:
        """Dask's configuration for these credentials: TLS required, every role's files."""
        out: dict[str, Any] = {"distributed.comm.require-encryption": True,
                               "distributed.comm.tls.ca-file": str(self.ca)}
        for role in ROLES:
            out[f"distributed.comm.tls.{role}.cert"] = str(self.cert(role))
            out[f"distributed.comm.tls.{role}.key"] = str(self.key(role))
        return out

    def env(self) -> dict[str, str]:
        """The same as environment variables, for a process Dask starts in (a worker)."""
        return {"DASK_" + k.upper().replace(".", "__").replace("-", "_"): str(v) for k, v in self.config().items()}

    def security(self) -> Any:
        """A ``distributed.security.Security`` for these credentials (every role)."""
        from distributed.security import Security  # noqa: PLC0415 - Dask loads only for a cluster

        kw: dict[str, Any] = {"tls_ca_file": str(self.ca), "require_encryption": True}
        for role in ROLES:
            kw[f"tls_{role}_cert"] = str(self.cert(role))
            kw[f"tls_{role}_key"] = str(self.key(role))
        return Security(**kw)  # type: ignore[no-untyped-call]


def make(directory: Path, *, days: int = 2, keep_ca_key: bool = False, name: str = "satbench cluster") -> ClusterTLS:
    """Make a CA and a certificate per role in ``directory`` (created mode 0700,
    or an empty folder of the caller's; OSError for a symlink, another user's
    folder, or a file already there), valid for ``days``. The CA's key is
    written only with ``keep_ca_key`` (to sign more later, by hand)."""
    if directory.is_symlink():
        raise OSError(f"{directory} is a symlink")
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    if directory.stat().st_uid != os.geteuid():
        raise OSError(f"{directory} belongs to another user")
    os.chmod(directory, 0o700)
    tls = ClusterTLS(directory)
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=days)
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    none = serialization.NoEncryption()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "satbench"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA {secrets.token_hex(4)}")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now).not_valid_after(until)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .sign(ca_key, hashes.SHA256()))
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        leaf = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "satbench"),
                                         x509.NameAttribute(NameOID.COMMON_NAME, f"{name} {role}")]))
                .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now).not_valid_after(until)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        _write_new(tls.key(role), key.private_bytes(pem, pkcs8, none), 0o600)
        _write_new(tls.cert(role), leaf.public_bytes(pem) + ca_cert.public_bytes(pem), 0o644)
    _write_new(tls.ca, ca_cert.public_bytes(pem), 0o644)
    if keep_ca_key:
        _write_new(directory / "ca.key", ca_key.private_bytes(pem, pkcs8, none), 0o600)
    return tls


__all__ = ["ROLES", "ClusterTLS", "make"]
