"""Certificates a test makes for itself with the openssl CLI: a CA, a server certificate it
signed (for 127.0.0.1 and a DNS name), a client certificate, and the client key encrypted."""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

SERVER_NAME = "apiserver.configmirror.test"  # the server certificate's DNS name
CLIENT_NAME = "configmirror-test-client"     # the client certificate's common name
KEY_PASSWORD = "secret-password"


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    encrypted_client_key: Path   # the client key, encrypted with KEY_PASSWORD
    other_ca: Path               # a CA that signed nothing here

    def server_context(self, require_client_cert: bool = False) -> ssl.SSLContext:
        """A server-side TLS context with the server certificate; optionally one that asks
        for a client certificate signed by the CA (and refuses a handshake without one)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.server_cert, self.server_key)
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cafile=self.ca)
        return context


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_pki(folder: Path, ip: str = "127.0.0.1") -> Pki:
    """Make the certificates in `folder` (EC keys: fast to make)."""
    folder.mkdir(parents=True, exist_ok=True)

    def key(name: str) -> Path:
        path = folder / f"{name}.key"
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-out", str(path))
        return path

    def ca(name: str) -> Path:
        cert = folder / f"{name}.crt"
        _openssl("req", "-x509", "-new", "-key", str(key(name)), "-days", "2", "-subj",
                 f"/CN={name}", "-out", str(cert))
        return cert

    def signed(name: str, subject: str, extensions: str) -> tuple[Path, Path]:
        private = key(name)
        request, cert, ext = (folder / f"{name}.csr", folder / f"{name}.crt",
                              folder / f"{name}.ext")
        ext.write_text(extensions)
        _openssl("req", "-new", "-key", str(private), "-subj", subject, "-out", str(request))
        _openssl("x509", "-req", "-in", str(request), "-CA", str(folder / "ca.crt"),
                 "-CAkey", str(folder / "ca.key"), "-CAcreateserial", "-days", "2",
                 "-extfile", str(ext), "-out", str(cert))
        return cert, private

    authority = ca("ca")
    server_cert, server_key = signed(
        "server", "/CN=configmirror-test-server",
        f"subjectAltName=DNS:{SERVER_NAME},IP:{ip}\nextendedKeyUsage=serverAuth\n")
    client_cert, client_key = signed("client", f"/CN={CLIENT_NAME}",
                                     "extendedKeyUsage=clientAuth\n")
    encrypted = folder / "client-encrypted.key"
    _openssl("pkey", "-in", str(client_key), "-aes-128-cbc", "-passout",
             f"pass:{KEY_PASSWORD}", "-out", str(encrypted))
    return Pki(authority, server_cert, server_key, client_cert, client_key, encrypted,
               ca("other-ca"))
