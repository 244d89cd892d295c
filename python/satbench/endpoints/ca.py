"""The test CA: made once per installation, outside the repository.

    ~/.local/share/satbench/ca/ca.key        private key, mode 0600
    ~/.local/share/satbench/ca/ca.pem        the CA certificate
    ~/.local/share/satbench/ca/server.key    server key, mode 0600
    ~/.local/share/satbench/ca/server.pem    server certificate chain (leaf, CA)

``$SATBENCH_CA_DIR`` overrides the folder. The server certificate names every
server of a testbed (``server.test``, ``s1.test`` … ``s32.test``) and their
addresses. Browsers trust the CA through an NSS database in a temporary HOME
(:func:`nss_home`): that works for TLS and for QUIC in Chromium and Firefox.
Keys are ECDSA P-256; certificates are valid for ten years from creation.

The CA is made on this machine, once, and never leaves it. satbench never
adds it to a system or user trust store: only to the NSS database of a
browser HOME it makes for a trial, or of a folder ``satbench ca --nss-home``
names (with a warning). ``satbench ca --renew`` (:func:`renew`) replaces it.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..errors import PrerequisiteError

MAX_SERVERS = 32


def ca_dir() -> Path:
    env = os.environ.get("SATBENCH_CA_DIR")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share"))
    return base / "satbench" / "ca"


def server_names() -> list[str]:
    return ["server.test"] + [f"s{i}.test" for i in range(1, MAX_SERVERS + 1)]


def server_addresses() -> list[str]:
    return [f"198.18.3.{9 + i}" for i in range(1, MAX_SERVERS + 1)]


@dataclass(frozen=True)
class CA:
    dir: Path

    @property
    def cert(self) -> Path:
        return self.dir / "ca.pem"

    @property
    def key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.dir / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.dir / "server.key"


def _write_private(path: Path, data: bytes) -> None:
    """Write a private key readable by its owner only, from its creation on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def _tighten(ca: CA) -> None:
    """The folder mode 0700 and every key 0600, whatever they were set to since."""
    os.chmod(ca.dir, 0o700)
    for key in [ca.key, ca.server_key, *sorted((ca.dir / "sites").glob("*.key"))]:
        if key.exists() and key.stat().st_mode & 0o077:
            os.chmod(key, 0o600)


def ensure(directory: Path | None = None) -> CA:
    """Return the CA, making it (and the server certificate) the first time."""
    ca = CA(directory or ca_dir())
    if all(p.exists() for p in (ca.cert, ca.key, ca.server_cert, ca.server_key)):
        _tighten(ca)
        return ca
    ca.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(ca.dir, 0o700)
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)
    until = now + datetime.timedelta(days=3650)
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    none = serialization.NoEncryption()

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "satbench"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"satbench test CA ({os.uname().nodename})")])
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

    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names()]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in server_addresses()]
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "server.test")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            # Browsers cap server certificates at 398 days.
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=397))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))

    _write_private(ca.key, ca_key.private_bytes(pem, pkcs8, none))
    _write_private(ca.server_key, key.private_bytes(pem, pkcs8, none))
    ca.server_cert.write_bytes(leaf.public_bytes(pem) + ca_cert.public_bytes(pem))
    ca.cert.write_bytes(ca_cert.public_bytes(pem))
    return ca


def renew(directory: Path | None = None) -> CA:
    """A new CA (and server certificate) in place of the old one; the site
    certificates it signed are removed, to be issued again when needed. A
    browser HOME made to trust the old CA (``--nss-home``) must be made again."""
    ca = CA(directory or ca_dir())
    for p in (ca.cert, ca.key, ca.server_cert, ca.server_key):
        p.unlink(missing_ok=True)
    shutil.rmtree(ca.dir / "sites", ignore_errors=True)
    return ensure(ca.dir)


def issue(names: list[str], ca: CA | None = None) -> tuple[Path, Path]:
    """A server certificate (chain, key) for ``names`` alone, signed by the test CA: a replayed
    site's origin shows its own certificate, as on the real site. Made once per set of names and
    kept beside the CA (``sites/``)."""
    import hashlib  # noqa: PLC0415

    ca = ca or ensure()
    folder = ca.dir / "sites"
    tag = hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()[:16]
    cert, keyfile = folder / f"{tag}.pem", folder / f"{tag}.key"
    if cert.exists() and keyfile.exists():
        return cert, keyfile
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    pem = serialization.Encoding.PEM
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise PrerequisiteError([f"{ca.key}: not the test CA's EC key"])
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=397))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write_private(keyfile, key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    cert.write_bytes(leaf.public_bytes(pem) + ca_cert.public_bytes(pem))
    return cert, keyfile


def home_of_user_note(home: Path) -> str:
    """``"; ... is USER's home ..."`` when ``home`` is an account's home folder, else ``""``."""
    import pwd  # noqa: PLC0415

    try:
        target = home.resolve()
        users = [u.pw_name for u in pwd.getpwall() if u.pw_dir not in ("", "/") and Path(u.pw_dir).resolve() == target]
    except OSError:
        return ""
    if not users:
        return ""
    return (f"; it is the home of {', '.join(users)}: their browsers now trust the CA. Undo with: certutil -D "
            f"-d sql:{home / '.pki' / 'nssdb'} -n 'satbench test CA'")


def nss_home(home: Path, ca: CA | None = None) -> Path:
    """Make ``home/.pki/nssdb`` trust the CA; use ``home`` as HOME for a
    browser so that it trusts the testbed's servers for TLS and QUIC."""
    certutil = shutil.which("certutil")
    if certutil is None:
        raise PrerequisiteError(["no certutil: install libnss3-tools (scripts/setup does)"])
    ca = ca or ensure()
    db = home / ".pki" / "nssdb"
    db.mkdir(parents=True, exist_ok=True)
    if not (db / "cert9.db").exists():
        subprocess.run([certutil, "-N", "-d", f"sql:{db}", "--empty-password"], check=True, capture_output=True)
    subprocess.run([certutil, "-A", "-d", f"sql:{db}", "-n", "satbench test CA", "-t", "C,,", "-i", str(ca.cert)],
                   check=True, capture_output=True)
    return home
