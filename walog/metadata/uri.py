"""Metadata store URIs and record paths: parsing and validation.

Accepted URIs::

    zk://[USER:SECRET@]HOST:PORT[,HOST:PORT...][/CHROOT][?OPTIONS]
    sqlite:///ABS/PATH.db[?session_timeout=SECONDS&heartbeat=SECONDS&poll=SECONDS]

A ZooKeeper URI without a chroot uses ``/walog``. ``session_timeout`` bounds how long a
liveness-bound record (:meth:`MetadataStore.register`) outlives its process: the ZooKeeper
session timeout, or the expiry of an SQLite heartbeat row.

ZooKeeper options: ``session_timeout=SECONDS``; ``auth_file=PATH`` (a file holding
``USER:SECRET``, instead of credentials in the URI, which other users can see in process
lists); ``reader_auth_file=PATH`` (``USER:SECRET`` of a read-only principal, for
dashboards); ``tls_ca=PATH``, ``tls_cert=PATH``, ``tls_key=PATH`` (PEM files: TLS to
ZooKeeper's secure client port; ``tls_ca`` alone verifies the servers, with ``tls_cert`` and
``tls_key`` the client presents a certificate too); ``auth_scheme=digest`` (the default) or
``auth_scheme=sasl``: how the credentials authenticate the session, ZooKeeper's digest
scheme or SASL DIGEST-MD5 against the server's JAAS ``Server`` section (the ACLs then name
the SASL principals). With credentials, every record walog creates carries an ACL granting
them all rights (and the reader read rights) and nobody else anything. Secrets never appear
in errors: :func:`redact_uri` shows a URI safely.
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse

ACCEPTED_FORMS = "zk://HOST:PORT[,HOST:PORT...]/CHROOT or sqlite:///ABS/PATH.db"
DEFAULT_CHROOT = "/walog"
DEFAULT_ZK_SESSION_TIMEOUT = 10.0
DEFAULT_SQLITE_SESSION_TIMEOUT = 3.0
DEFAULT_SQLITE_HEARTBEAT = 0.5
DEFAULT_SQLITE_POLL = 0.02

_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$")
_PATH_COMPONENT = re.compile(r"^[^/\x00]+$")


@dataclasses.dataclass(frozen=True)
class DigestCredentials:
    """A ZooKeeper digest-auth principal; the secret never shows in ``repr``."""

    user: str
    secret: str = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class ZooKeeperURI:
    """A parsed ``zk://`` URI."""

    hosts: tuple[str, ...]
    """``HOST:PORT`` of each server."""
    chroot: str
    """Absolute path under which every record of the store lives."""
    session_timeout: float = DEFAULT_ZK_SESSION_TIMEOUT
    """Requested ZooKeeper session timeout, seconds (the server may clamp it)."""
    auth: DigestCredentials | None = None
    """walog's principal: authenticates the session and owns every record it creates."""
    reader: DigestCredentials | None = None
    """A principal granted read rights on every record walog creates."""
    tls_ca: str | None = None
    """PEM CA bundle verifying the servers: TLS to the secure client port."""
    tls_cert: str | None = None
    """PEM client certificate (with ``tls_key``)."""
    tls_key: str | None = None
    """PEM private key of ``tls_cert``."""
    auth_scheme: str = "digest"
    """How ``auth`` authenticates the session: ``digest`` or ``sasl`` (DIGEST-MD5)."""

    @property
    def connect_string(self) -> str:
        """The kazoo hosts string (without chroot)."""
        return ",".join(self.hosts)


@dataclasses.dataclass(frozen=True)
class SqliteURI:
    """A parsed ``sqlite:///`` URI."""

    path: str
    """Absolute path of the database file."""
    session_timeout: float = DEFAULT_SQLITE_SESSION_TIMEOUT
    """A liveness row not refreshed for this long is expired, seconds."""
    heartbeat: float = DEFAULT_SQLITE_HEARTBEAT
    """How often a store refreshes its liveness rows, seconds."""
    poll: float = DEFAULT_SQLITE_POLL
    """How often the watch poller looks for changes, seconds."""

    def __post_init__(self) -> None:
        if self.heartbeat >= self.session_timeout:
            raise ValueError(
                f"sqlite URI: heartbeat={self.heartbeat} must be shorter than "
                f"session_timeout={self.session_timeout}"
            )


def redact_uri(uri: str) -> str:
    """``uri`` with the secret of ``USER:SECRET@`` credentials replaced by ``***``."""
    scheme, sep, rest = uri.partition("://")
    userinfo, at, after = rest.partition("@")
    if not sep or not at or "/" in userinfo:
        return uri
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:***@{after}"


def _bad(uri: str, problem: str) -> ValueError:
    return ValueError(
        f"bad metadata URI {redact_uri(uri)!r}: {problem}; accepted forms: {ACCEPTED_FORMS}"
    )


def _positive_seconds(uri: str, name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise _bad(uri, f"{name}={raw!r} is not a number of seconds") from None
    if not value > 0:
        raise _bad(uri, f"{name} must be > 0 seconds, got {raw}")
    return value


def _raw_query(uri: str, raw_query: str, allowed: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        pairs = urllib.parse.parse_qsl(raw_query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise _bad(uri, "malformed query") from None
    for key, value in pairs:
        if key not in allowed:
            raise _bad(uri, f"unknown option {key!r} (known: {', '.join(allowed)})")
        out[key] = value
    return out


def _query(uri: str, raw_query: str, allowed: tuple[str, ...]) -> dict[str, float]:
    return {
        key: _positive_seconds(uri, key, value)
        for key, value in _raw_query(uri, raw_query, allowed).items()
    }


def _credentials(uri: str, text: str, where: str) -> DigestCredentials:
    user, colon, secret = text.strip().partition(":")
    if not colon or not user or not secret:
        raise _bad(uri, f"{where} must hold USER:SECRET")
    return DigestCredentials(user, secret)


def _credentials_file(uri: str, option: str, path: str) -> DigestCredentials:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise _bad(uri, f"{option}={path}: {exc.strerror}") from None
    return _credentials(uri, text, f"{option} {path}")


def parse_uri(uri: str) -> ZooKeeperURI | SqliteURI:
    """Parse a metadata store URI.

    Raises:
        ValueError: naming the problem and the accepted forms.
    """
    if not isinstance(uri, str):
        raise TypeError(f"metadata URI must be a str, got {type(uri).__name__}")
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise _bad(uri, "missing scheme")
    rest, _, raw_query = rest.partition("?")
    if scheme == "zk":
        return _parse_zk(uri, rest, raw_query)
    if scheme == "sqlite":
        return _parse_sqlite(uri, rest, raw_query)
    raise _bad(uri, f"unknown scheme {scheme!r}")


_ZK_OPTIONS = (
    "session_timeout",
    "auth_file",
    "reader_auth_file",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "auth_scheme",
)
AUTH_SCHEMES = ("digest", "sasl")


def _parse_zk(uri: str, rest: str, raw_query: str) -> ZooKeeperURI:
    netloc, slash, chroot = rest.partition("/")
    userinfo, at, netloc = netloc.rpartition("@")
    auth = _credentials(uri, urllib.parse.unquote(userinfo), "the URI's user part") if at else None
    if not netloc:
        raise _bad(uri, "no ZooKeeper HOST:PORT given")
    hosts: list[str] = []
    for host in netloc.split(","):
        match = _HOST_PORT.match(host)
        if match is None:
            raise _bad(uri, f"{host!r} is not HOST:PORT")
        if not 0 < int(match["port"]) < 65536:
            raise _bad(uri, f"port {match['port']} is out of range")
        hosts.append(host)
    root = DEFAULT_CHROOT
    if slash and chroot.rstrip("/"):
        try:
            root = check_path("/" + chroot.rstrip("/"))
        except ValueError as exc:
            raise _bad(uri, f"bad chroot: {exc}") from None
    raw = _raw_query(uri, raw_query, _ZK_OPTIONS)
    if "auth_file" in raw:
        if auth is not None:
            raise _bad(uri, "give credentials either in the URI or in auth_file, not both")
        auth = _credentials_file(uri, "auth_file", raw["auth_file"])
    reader = None
    if "reader_auth_file" in raw:
        if auth is None:
            raise _bad(uri, "reader_auth_file needs walog's own credentials too")
        reader = _credentials_file(uri, "reader_auth_file", raw["reader_auth_file"])
    if ("tls_cert" in raw) != ("tls_key" in raw):
        raise _bad(uri, "tls_cert and tls_key go together")
    if "tls_cert" in raw and "tls_ca" not in raw:
        raise _bad(uri, "tls_cert needs tls_ca (the servers are verified first)")
    scheme = raw.get("auth_scheme", "digest")
    if scheme not in AUTH_SCHEMES:
        raise _bad(uri, f"auth_scheme={scheme!r}: expected 'digest' or 'sasl'")
    if "auth_scheme" in raw and auth is None:
        raise _bad(uri, "auth_scheme needs credentials (USER:SECRET@ or auth_file)")
    timeout = raw.get("session_timeout")
    return ZooKeeperURI(
        tuple(hosts),
        root,
        _positive_seconds(uri, "session_timeout", timeout)
        if timeout is not None
        else (DEFAULT_ZK_SESSION_TIMEOUT),
        auth=auth,
        reader=reader,
        tls_ca=raw.get("tls_ca"),
        tls_cert=raw.get("tls_cert"),
        tls_key=raw.get("tls_key"),
        auth_scheme=scheme,
    )


def _parse_sqlite(uri: str, rest: str, raw_query: str) -> SqliteURI:
    if not rest.startswith("/"):
        raise _bad(uri, "sqlite URIs take no host; use three slashes before an absolute path")
    path = urllib.parse.unquote(rest)
    if path == "/" or path.endswith("/"):
        raise _bad(uri, "no database file name")
    options = _query(uri, raw_query, ("session_timeout", "heartbeat", "poll"))
    if "heartbeat" not in options and "session_timeout" in options:
        options["heartbeat"] = min(DEFAULT_SQLITE_HEARTBEAT, options["session_timeout"] / 4)
    try:
        return SqliteURI(path, **options)
    except ValueError as exc:
        raise _bad(uri, str(exc)) from None


def check_path(path: str) -> str:
    """Validate a record path (absolute, ``/``-separated, no empty or dot components).

    Returns:
        The path unchanged.

    Raises:
        ValueError: naming what is wrong with the path.
    """
    if not isinstance(path, str):
        raise TypeError(f"metadata path must be a str, got {type(path).__name__}")
    if path == "/":
        return path
    if not path.startswith("/"):
        raise ValueError(f"metadata path {path!r} must be absolute (start with '/')")
    if path.endswith("/"):
        raise ValueError(f"metadata path {path!r} must not end with '/'")
    for part in path[1:].split("/"):
        if part in ("", ".", "..") or _PATH_COMPONENT.match(part) is None:
            raise ValueError(f"metadata path {path!r} has an invalid component {part!r}")
    return path


def parent_of(path: str) -> str:
    """The parent path (``/`` for top-level records)."""
    head = path.rsplit("/", 1)[0]
    return head or "/"


def check_counter(name: str) -> str:
    """Validate a counter name (non-empty, no ``/``)."""
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise ValueError(f"counter name {name!r} must be a non-empty name without '/'")
    return name


__all__ = [
    "ACCEPTED_FORMS",
    "DEFAULT_CHROOT",
    "DigestCredentials",
    "SqliteURI",
    "ZooKeeperURI",
    "check_counter",
    "check_path",
    "parent_of",
    "parse_uri",
    "redact_uri",
]
