"""Writes a self-signed TLS certificate and key for the compose trial, unless both exist already.

Usage: selfsigned-cert.py DIR HOSTNAME [HOSTNAME...]. Writes DIR/tls.crt and DIR/tls.key (the
names nginx reads); replace them with a real certificate for anything but a trial. Uses the
``cryptography`` library the control plane already installs (through django-allauth).
"""

import datetime
import ipaddress
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def alt_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def main(folder: str, *hosts: str) -> None:
    folder_path = Path(folder)
    crt, key_file = folder_path / "tls.crt", folder_path / "tls.key"
    if crt.exists() and key_file.exists():
        print(f"{crt} exists: kept")
        return
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([alt_name(h) for h in hosts]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_file.chmod(0o640)
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    print(f"wrote a self-signed certificate for {', '.join(hosts)} to {crt}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: selfsigned-cert.py DIR HOSTNAME [HOSTNAME...]")
    main(sys.argv[1], *sys.argv[2:])
