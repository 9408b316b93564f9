"""Transport security of the bookie port: TLS (optionally mutual) and a bearer token.

With ``--auth-token-file`` every call must carry the metadata
``authorization: Bearer <token>``; other calls fail with gRPC status UNAUTHENTICATED.
The standard health service stays open: probes learn only SERVING / NOT_SERVING.

Tokens rotate without a restart: on SIGHUP the bookie reads the file again, and a changed
token becomes the one in force while the previous one is still accepted for
``--auth-token-grace`` seconds, so clients can move over (:class:`BearerTokens`).
"""

from __future__ import annotations

import hmac
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from bookie.config import BookieConfig

_OPEN_PREFIXES = ("/grpc.health.v1.Health/",)


def read_token(path: Path) -> str:
    """The token in ``path`` (surrounding whitespace removed).

    Raises:
        ValueError: the file is empty.
        OSError: the file cannot be read.
    """
    token = path.read_text().strip()
    if not token:
        raise ValueError(f"the auth token file {path} is empty")
    return token


class BearerTokens:
    """The tokens a bookie accepts: the file's current one, and after a rotation the
    previous one until its grace period ends. Never logs or shows a token.

    Args:
        path: the token file.
        grace_s: seconds the previous token stays valid after a rotation.
        clock: monotonic seconds (tests may pass their own).
    """

    def __init__(
        self, path: Path, grace_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._path = path
        self._grace_s = grace_s
        self._clock = clock
        self._current = read_token(path).encode()
        self._previous: bytes | None = None
        self._previous_until = 0.0

    def accepts(self, token: bytes) -> bool:
        """Whether ``token`` is the current one, or the previous one within its grace."""
        # Constant-time comparisons: a token must not leak through timing.
        if hmac.compare_digest(token, self._current):
            return True
        previous = self._previous
        return (
            previous is not None
            and self._clock() < self._previous_until
            and hmac.compare_digest(token, previous)
        )

    def reload(self) -> bool:
        """Read the file again; True when the token changed (the old one then keeps
        working for the grace period).

        Raises:
            ValueError, OSError: as :func:`read_token` (the tokens in force stay).
        """
        new = read_token(self._path).encode()
        if hmac.compare_digest(new, self._current):
            return False
        self._previous, self._current = self._current, new
        self._previous_until = self._clock() + self._grace_s
        return True


class ServerCertificates:
    """The bookie's TLS certificate, key and client CA, for both ports, reloadable: after
    :meth:`reload` (SIGHUP) new connections get the files' current contents, connections
    already open keep theirs.

    Args:
        cert: PEM certificate chain.
        key: PEM private key of ``cert``.
        ca: PEM CA bundle that client certificates must chain to (mutual TLS), or None.
    """

    def __init__(self, cert: Path, key: Path, ca: Path | None) -> None:
        self._cert, self._key, self._ca = cert, key, ca
        self._fresh: grpc.ServerCertificateConfiguration | None = None
        self.ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        """The native port's TLS settings (updated in place by :meth:`reload`)."""
        self._load_into_context()

    def _grpc_configuration(self) -> grpc.ServerCertificateConfiguration:
        ca = self._ca.read_bytes() if self._ca is not None else None
        return grpc.ssl_server_certificate_configuration(
            [(self._key.read_bytes(), self._cert.read_bytes())], root_certificates=ca
        )

    def _load_into_context(self) -> None:
        self.ssl_context.load_cert_chain(str(self._cert), str(self._key))
        if self._ca is not None:
            self.ssl_context.load_verify_locations(str(self._ca))
            self.ssl_context.verify_mode = ssl.CERT_REQUIRED

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """The gRPC port's credentials; each new connection asks for a fresher certificate."""

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            fresh, self._fresh = self._fresh, None
            return fresh

        # gRPC calls the fetcher for each new connection; None keeps the configuration in
        # force (its stub declares the return type without the None it documents).
        return grpc.dynamic_ssl_server_credentials(
            self._grpc_configuration(),
            fetch,  # type: ignore[arg-type]
            require_client_authentication=self._ca is not None,
        )

    def reload(self) -> None:
        """Read the files again; both ports hand the new certificate to new connections.

        Raises:
            OSError, ssl.SSLError: a file is missing or not PEM (the old ones stay).
        """
        configuration = self._grpc_configuration()
        self._load_into_context()
        self._fresh = configuration


def server_certificates(config: BookieConfig) -> ServerCertificates | None:
    """The bookie's certificates, or None when TLS is off."""
    if config.tls_cert is None or config.tls_key is None:
        return None
    return ServerCertificates(config.tls_cert, config.tls_key, config.tls_ca)


async def _deny_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")


if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # the runtime class is not generic
    _Interceptor = grpc.aio.ServerInterceptor


class TokenAuthInterceptor(_Interceptor):
    """Refuses calls whose ``authorization`` metadata is not ``Bearer <token>`` with a
    token ``tokens`` accepts.

    Args:
        tokens: the tokens in force.
    """

    def __init__(self, tokens: BearerTokens) -> None:
        self._tokens = tokens

    def _allowed(self, details: grpc.HandlerCallDetails) -> bool:
        if details.method.startswith(_OPEN_PREFIXES):
            return True
        for key, value in details.invocation_metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else bytes(value)
                scheme, _, token = given.partition(b" ")
                return scheme == b"Bearer" and self._tokens.accepts(token)
        return False

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None or self._allowed(handler_call_details):
            return handler
        # Answer with a handler of the same shape, so a streaming client is refused at
        # once instead of the server waiting for a single request message.
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(_deny_unary)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(_deny_unary)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(_deny_unary)
        return grpc.unary_unary_rpc_method_handler(_deny_unary)


__all__ = [
    "BearerTokens",
    "ServerCertificates",
    "TokenAuthInterceptor",
    "read_token",
    "server_certificates",
]
