"""The lab API server's certificate files (drainsafe.tls), for 127.0.0.1 and `host`.

kubectl and lightkube verify the server against the kubeconfig's
certificate-authority, so the lab serves real TLS exactly as a cluster does.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

from drainsafe.lab.secretfile import private_dir, write_secret
from drainsafe.tls import issue


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: pathlib.Path
    server_cert: pathlib.Path
    server_key: pathlib.Path


def make_tls(directory: pathlib.Path, host: str = "127.0.0.1", *, days: int = 30) -> TlsFiles:
    """Write ca.crt, server.crt and server.key (a new file, mode 0600, never through a link:
    see secretfile.py) into `directory` (0700 when created here)."""
    private_dir(directory)
    made = issue(["localhost", "127.0.0.1", host], ca_name="drainsafe-lab-ca",
                 server_name="drainsafe-lab-apiserver", days=days)
    files = TlsFiles(directory / "ca.crt", directory / "server.crt", directory / "server.key")
    files.ca_cert.write_bytes(made.ca_pem)
    files.server_cert.write_bytes(made.cert_pem)
    write_secret(files.server_key, made.key_pem)
    return files
