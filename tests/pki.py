"""Test certificates made with the ``openssl`` command: a CA, a server certificate for
127.0.0.1 and a client certificate, as PEM files."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(d: Path) -> Path:
    """Write ``ca.pem``/``ca.key``, ``server.pem``/``server.key`` (for IP 127.0.0.1) and
    ``client.pem``/``client.key`` into the new directory ``d``; return ``d``."""
    d.mkdir()
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        "/CN=walog-test-ca", "-keyout", "ca.key", "-out", "ca.pem", cwd=d,
    )  # fmt: skip
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "")):
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d,
        )  # fmt: skip
        (d / f"{name}.ext").write_text((ext or "basicConstraints=CA:FALSE") + "\n")
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.pem",
            "-extfile", f"{name}.ext", cwd=d,
        )  # fmt: skip
    return d
