"""Client credentials for bookie connections: TLS and a bearer token.

A bookie started with ``--tls-cert/--tls-key`` serves TLS; with ``--tls-ca`` it also
requires a client certificate signed by that CA. A bookie started with
``--auth-token-file`` requires the metadata ``authorization: Bearer <token>`` on every call.
"""

from __future__ import annotations

import dataclasses
import ssl
from pathlib import Path

import grpc


def _read(path: str | Path | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the TLS {what} file {path}: {exc.strerror}") from exc


@dataclasses.dataclass(frozen=True)
class TlsConfig:
    """TLS settings of a client, as PEM file paths.

    Attributes:
        ca: the CA that signed the bookies' certificates (None: the system roots).
        cert: this client's certificate, for bookies that require client certificates.
        key: the private key of ``cert``.
        server_name: the name to check in the bookies' certificates, when it differs from
            the host part of the bookie ids (for example certificates issued for a DNS name
            while bookies register as IP addresses).
    """

    ca: str | Path | None = None
    cert: str | Path | None = None
    key: str | Path | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("TlsConfig needs both cert and key for a client certificate")

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials (files are read now, so a bad path fails early)."""
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca, "CA"),
            private_key=_read(self.key, "key"),
            certificate_chain=_read(self.cert, "certificate"),
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The same settings for the bookies' native port (files are read now)."""
        for path, what in ((self.ca, "CA"), (self.cert, "certificate"), (self.key, "key")):
            _read(path, what)  # one clear error for a bad path, as for gRPC
        context = ssl.create_default_context(cafile=str(self.ca) if self.ca else None)
        if self.cert is not None and self.key is not None:
            context.load_cert_chain(str(self.cert), str(self.key))
        return context


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying the bearer token (empty without a token)."""
    if token is None:
        return ()
    token = token.strip()
    if not token:
        raise ValueError("auth_token is empty")
    return (("authorization", f"Bearer {token}"),)


def credentials_from_files(
    tls_ca: str | Path | None = None,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
    auth_token_file: str | Path | None = None,
) -> tuple[TlsConfig | None, str | None]:
    """The ``tls`` and ``auth_token`` of ``walog.connect`` from file paths, as the CLI and
    the Spark options name them (None where no file is given).

    Raises:
        ValueError: cert without key (or the reverse), or the token file cannot be read
            (naming it).
    """
    tls = None
    if tls_ca or tls_cert or tls_key:
        tls = TlsConfig(ca=tls_ca, cert=tls_cert, key=tls_key)
    token = None
    if auth_token_file is not None:
        try:
            token = Path(auth_token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(
                f"cannot read the token file {auth_token_file}: {exc.strerror}"
            ) from exc
    return tls, token


__all__ = ["TlsConfig", "auth_metadata", "credentials_from_files"]
