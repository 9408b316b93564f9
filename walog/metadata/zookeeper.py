"""ZooKeeper metadata store through kazoo: znode versions are the compare-and-swap.

Every record lives under the URI's chroot (created when missing). kazoo calls run on a
small thread pool of this store, never on the event loop. While the connection is
suspended, calls are retried (tenacity, on the retriable :class:`~walog.errors.MetadataError`);
each call of the store, retries included, ends within the store's call timeout (see
:func:`~walog.metadata.store.call_timed_out`).

Liveness-bound records are ephemeral znodes. A kazoo state listener notes a lost session
and, once a new session is connected, re-creates them and re-arms every watch from the
store's event thread (the listener itself never blocks: it runs on kazoo's connection
thread). Watches are persistent: each path keeps one-shot ``exists`` and ``get_children``
watches armed again after every event; user callbacks run on the store's event thread,
never on kazoo's, so they may call the store back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionClosedError,
    KazooException,
    NoAuthError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.exceptions import NodeExistsError as KazooNodeExistsError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.retry import KazooRetry
from kazoo.security import make_acl, make_digest_acl
from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from walog._loggers import adopt
from walog.errors import MetadataConflictError, MetadataError, UnauthorizedError, is_retriable
from walog.metadata.store import (
    MetadataStore,
    NodeExistsError,
    NodeNotFoundError,
    WatchCallback,
    call_timed_out,
)
from walog.metadata.uri import ZooKeeperURI, check_counter, check_path

log = logging.getLogger(__name__)
# kazoo's own lines (lost connections, reconnect attempts) are walog's: see walog._loggers.
adopt("kazoo", f"{__name__}.kazoo")
T = TypeVar("T")

COUNTERS = "/_counters"
"""Where :meth:`ZooKeeperStore.next_id` keeps its counter znodes (under the chroot)."""


def _security_options(config: ZooKeeperURI) -> dict[str, Any]:
    """kazoo's settings for the URI's credentials and TLS: the session authenticates as
    walog's principal, and every record it creates grants that principal all rights, the
    read-only principal read rights, and nobody else anything."""
    options: dict[str, Any] = {}
    auth, reader = config.auth, config.reader
    if auth is not None and config.auth_scheme == "sasl":
        # SASL DIGEST-MD5 (kazoo through pure-sasl): the server checks the secret against
        # its JAAS Server section and knows the session as sasl:USER.
        options["sasl_options"] = {
            "mechanism": "DIGEST-MD5",
            "username": auth.user,
            "password": auth.secret,
        }
        acl = [make_acl("sasl", auth.user, all=True)]
        if reader is not None:
            acl.append(make_acl("sasl", reader.user, read=True))
        options["default_acl"] = acl
    elif auth is not None:
        options["auth_data"] = [("digest", f"{auth.user}:{auth.secret}")]
        acl = [make_digest_acl(auth.user, auth.secret, all=True)]
        if reader is not None:
            acl.append(make_digest_acl(reader.user, reader.secret, read=True))
        options["default_acl"] = acl
    if config.tls_ca is not None:
        options.update(use_ssl=True, ca=config.tls_ca, verify_certs=True)
        if config.tls_cert is not None:
            options.update(certfile=config.tls_cert, keyfile=config.tls_key)
    return options


def _is_connection_error(exc: BaseException) -> bool:
    return isinstance(exc, MetadataError) and is_retriable(exc)


class ZooKeeperStore(MetadataStore):
    """:class:`MetadataStore` over ZooKeeper (kazoo).

    Open it with :meth:`open` (or :func:`walog.metadata.open_store`). Watch callbacks run on
    the store's event thread: once when the watch is armed, after every change, and after
    every reconnection (changes made while disconnected are never missed).
    """

    def __init__(
        self, config: ZooKeeperURI, *, timeout: float = 10.0, call_timeout: float | None = None
    ) -> None:
        self._config = config
        self._root = "" if config.chroot == "/" else config.chroot
        self._timeout = timeout
        self._call_timeout = timeout if call_timeout is None else call_timeout
        self._create = True  # create the chroot when missing (open's ``create``)
        self._client = KazooClient(
            hosts=config.connect_string,
            timeout=config.session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
            **_security_options(config),
        )
        self._calls = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="walog-zk")
        # One thread for watch callbacks and session recovery: ordered, never kazoo's own.
        self._events = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="walog-zk-ev")
        self._lock = threading.Lock()  # guards _registered and _watches
        self._registered: dict[str, bytes] = {}
        self._watches: dict[str, dict[int, WatchCallback]] = {}
        self._handlers: dict[str, Callable[[WatchedEvent], None]] = {}
        self._tokens = itertools.count()
        self._session_lost = False
        self._connected_before = False
        self._expiry_listeners: dict[int, Callable[[], None]] = {}
        self._expiry_timer: threading.Timer | None = None
        self._closed = False

    @classmethod
    async def open(
        cls,
        config: ZooKeeperURI,
        *,
        timeout: float = 10.0,  # noqa: ASYNC109 - the connection's limit, not a deadline
        call_timeout: float | None = None,
        create: bool = True,
    ) -> ZooKeeperStore:
        """Connect (waiting up to ``timeout`` seconds, also for a ZooKeeper that is still
        starting: the ``walog`` commands ask first whether anything listens), create the
        chroot if missing (unless ``create`` is False: then a missing chroot is a
        MetadataError naming it), and start watching the session state; each later call
        ends within ``call_timeout`` seconds (None: ``timeout``)."""
        store = cls(config, timeout=timeout, call_timeout=call_timeout)
        store._create = create
        store._client.add_listener(store._on_state)
        try:
            # Not retried: kazoo's start() already keeps connecting until the timeout.
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(store._calls, store._call, store._start, config.chroot)
        except BaseException:
            await asyncio.to_thread(store._shutdown)
            raise
        return store

    def _start(self) -> None:
        self._client.start(timeout=self._timeout)
        if self._create:
            self._client.ensure_path(self._config.chroot)
        elif self._client.exists(self._config.chroot) is None:
            err = MetadataError(
                f"ZooKeeper {self._config.connect_string} has no {self._config.chroot} "
                "(check the chroot of the metadata URI; this command creates none)"
            )
            err.retriable = False
            raise err

    def _full(self, path: str) -> str:
        check_path(path)
        return self._root + path if path != "/" else (self._root or "/")

    # -- the one boundary where kazoo errors are translated ------------------------------

    def _closed_error(self) -> MetadataError:
        err = MetadataError(f"ZooKeeper metadata store {self._config.chroot} is closed")
        err.retriable = False  # only a new store can serve this call
        return err

    def _call(self, fn: Callable[[], T], path: str) -> T:
        try:
            return fn()
        except NoNodeError as exc:
            raise NodeNotFoundError(f"metadata record {path} does not exist") from exc
        except KazooNodeExistsError as exc:
            raise NodeExistsError(f"metadata record {path} already exists") from exc
        except BadVersionError as exc:
            raise MetadataConflictError(f"metadata record {path} changed (version)") from exc
        except ConnectionClosedError as exc:
            raise self._closed_error() from exc
        except (NoAuthError, AuthFailedError) as exc:
            who = self._config.auth.user if self._config.auth else "an unauthenticated client"
            raise UnauthorizedError(
                f"ZooKeeper {self._config.connect_string} refused {who} on {path}: not "
                "authorised (check the credentials of the metadata URI or its auth_file)"
            ) from exc
        except (KazooException, KazooTimeoutError) as exc:
            hosts = self._config.connect_string
            raise MetadataError(f"ZooKeeper {hosts} failed on {path}: {exc!r}") from exc

    async def _run(self, fn: Callable[[bool], T], path: str, *, what: str, change: bool) -> T:
        """Run ``fn(retried)`` on the call pool, retrying connection errors, all within the
        call timeout; ``retried`` tells ``fn`` that an earlier attempt may have been applied
        by the server although its reply was lost. ``what`` names the call and ``change``
        says whether it changes the store, for the error raised when time runs out."""
        if self._closed:
            raise self._closed_error()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._call_timeout):
                # No stop of its own: the call timeout ends the retries, so running out of
                # time always reads as a timeout (an unknown outcome for a change).
                async for attempt in AsyncRetrying(
                    retry=retry_if_exception(_is_connection_error),
                    wait=wait_exponential(multiplier=0.05, max=1.0),
                    reraise=True,
                ):
                    with attempt:
                        call = functools.partial(fn, attempt.retry_state.attempt_number > 1)
                        try:
                            done = loop.run_in_executor(self._calls, self._call, call, path)
                        except RuntimeError as exc:  # closed while an attempt was retried
                            raise self._closed_error() from exc
                        return await done
        except TimeoutError as exc:
            where = f"ZooKeeper {self._config.connect_string}"
            raise call_timed_out(where, what, path, self._call_timeout, change=change) from exc
        raise AssertionError("unreachable: tenacity reraises the last error")

    def _wait(self, async_result: Any) -> Any:
        # The awaiting call gives up at the call timeout; this thread does not wait longer.
        return async_result.get(timeout=self._call_timeout)

    # -- records -------------------------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, int]:
        """Return ``(data, version)``; :class:`NodeNotFoundError` if absent."""
        full = self._full(path)
        data, stat = await self._run(
            lambda _retried: self._wait(self._client.get_async(full)),
            path,
            what="get",
            change=False,
        )
        return bytes(data), int(stat.version)

    async def sync(self, path: str) -> None:
        """Make the server this session reads from catch up with the leader (ZooKeeper's
        ``sync``): a record created before the call, by any client, is seen by the reads
        made after it returns. The reply carries the leader's transaction id, so a session
        that reconnects to another server afterwards still never reads an older view."""
        full = self._full(path)
        await self._run(
            lambda _retried: self._wait(self._client.sync_async(full)),
            path,
            what="sync",
            change=False,
        )

    async def exists(self, path: str) -> int | None:
        """Return the record's version, or None when it does not exist."""
        full = self._full(path)
        stat = await self._run(
            lambda _retried: self._wait(self._client.exists_async(full)),
            path,
            what="exists",
            change=False,
        )
        return None if stat is None else int(stat.version)

    async def create(self, path: str, data: bytes, *, make_parents: bool = True) -> int:
        """Create a record (version 0); :class:`NodeExistsError` if it exists."""
        full, payload = self._full(path), bytes(data)

        def op(retried: bool) -> int:
            try:
                self._wait(self._client.create_async(full, payload, makepath=make_parents))
            except KazooNodeExistsError:
                if not (retried and self._is_state(full, payload, 0)):
                    raise
            return 0

        return await self._run(op, path, what="create", change=True)

    async def set(self, path: str, data: bytes, version: int) -> int:
        """Compare-and-swap the data (``version == -1`` matches any); return the new version."""
        full, payload = self._full(path), bytes(data)

        def op(retried: bool) -> int:
            try:
                return int(self._wait(self._client.set_async(full, payload, version)).version)
            except BadVersionError:
                if retried and version != -1 and self._is_state(full, payload, version + 1):
                    return version + 1
                raise

        return await self._run(op, path, what="set", change=True)

    async def delete(self, path: str, version: int = -1) -> None:
        """Delete a record and everything below it (any version when ``version == -1``).

        The version is checked before the children go; the record itself is deleted with
        that version, so a concurrent set still makes the call fail.
        """
        full = self._full(path)
        if full == (self._root or "/"):
            raise ValueError("the root metadata record cannot be deleted")

        def op(retried: bool) -> None:
            stat = self._wait(self._client.exists_async(full))
            if stat is None:
                if retried:
                    return  # the lost reply was to our own delete (or someone else's)
                raise NoNodeError()
            if version not in (-1, stat.version):
                raise BadVersionError()
            for attempt in Retrying(
                retry=retry_if_exception_type(NotEmptyError), stop=stop_after_attempt(5)
            ):
                with attempt:
                    self._delete_children(full)
                    self._wait(self._client.delete_async(full, version))

        await self._run(op, path, what="delete", change=True)

    def _is_state(self, full: str, data: bytes, version: int) -> bool:
        """After a lost reply: does the record hold what our own call would have left?"""
        try:
            current, stat = self._wait(self._client.get_async(full))
        except NoNodeError:
            return False
        return bool(current == data and stat.version == version)

    def _delete_children(self, full: str) -> None:
        try:
            names = self._wait(self._client.get_children_async(full))
        except NoNodeError:
            return
        for name in names:
            child = f"{full}/{name}"
            self._delete_children(child)
            with contextlib.suppress(NoNodeError):
                self._wait(self._client.delete_async(child))

    async def children(self, path: str) -> list[str]:
        """Sorted names of the direct children of ``path``; [] when none or absent."""
        full = self._full(path)

        def op(_retried: bool) -> list[str]:
            try:
                names = self._wait(self._client.get_children_async(full))
            except NoNodeError:
                return []
            if path == "/":  # the counters are not records (as in the SQLite store)
                names = [n for n in names if n != COUNTERS[1:]]
            return sorted(names)

        return await self._run(op, path, what="children", change=False)

    async def next_id(self, counter: str) -> int:
        """A new id from the named counter: the znode version produced by a blind set.

        Each set yields a distinct version, later sets larger ones, in one round trip with
        no CAS retries. Ids start at 1 and are bounded by ZooKeeper's 32-bit versions.
        """
        full = f"{self._root}{COUNTERS}/{check_counter(counter)}"

        def op(_retried: bool) -> int:
            try:
                return int(self._wait(self._client.set_async(full, b"", -1)).version)
            except NoNodeError:
                with contextlib.suppress(KazooNodeExistsError):
                    self._wait(self._client.create_async(full, b"", makepath=True))
                return int(self._wait(self._client.set_async(full, b"", -1)).version)

        return await self._run(op, f"{COUNTERS}/{counter}", what="next_id", change=True)

    # -- liveness ------------------------------------------------------------------------

    def _create_ephemeral(self, full: str, data: bytes) -> None:
        try:
            self._wait(self._client.create_async(full, data, ephemeral=True, makepath=True))
        except KazooNodeExistsError:
            # Ours when a retried create had succeeded before its reply was lost.
            stat = self._wait(self._client.exists_async(full))
            if stat is None or stat.ephemeralOwner != self._session_id():
                raise

    def _session_id(self) -> int | None:
        client_id = self._client.client_id
        return None if client_id is None else int(client_id[0])

    async def register(self, path: str, data: bytes) -> None:
        """Create an ephemeral record; :class:`NodeExistsError` if the path is taken."""
        full, payload = self._full(path), bytes(data)
        await self._run(
            lambda _retried: self._create_ephemeral(full, payload),
            path,
            what="register",
            change=True,
        )
        with self._lock:
            self._registered[path] = payload

    async def unregister(self, path: str) -> None:
        """Remove a record made by :meth:`register` (no error if already gone)."""
        full = self._full(path)
        with self._lock:
            self._registered.pop(path, None)

        def op(_retried: bool) -> None:
            stat = self._wait(self._client.exists_async(full))
            if stat is not None and stat.ephemeralOwner == self._session_id():
                with contextlib.suppress(NoNodeError):
                    self._wait(self._client.delete_async(full))

        await self._run(op, path, what="unregister", change=True)

    def _on_state(self, state: str) -> bool:
        # Runs on kazoo's connection thread: note the state, hand work to the event thread.
        if state == KazooState.LOST:
            self._session_lost = True
            self._session_expired()
        elif state == KazooState.SUSPENDED and not self._closed:
            # Without contact for a whole session timeout, the ensemble has expired the
            # session, whether or not this client can hear it say so yet.
            self._cancel_expiry_timer()
            timer = threading.Timer(self._config.session_timeout, self._presume_expired)
            timer.daemon = True
            self._expiry_timer = timer
            timer.start()
        elif state == KazooState.CONNECTED and not self._closed:
            self._cancel_expiry_timer()
            lost, self._session_lost = self._session_lost, False
            # The first connection has nothing to restore (open() has not returned yet).
            if self._connected_before:
                self._submit(self._after_connect, lost)
            self._connected_before = True
        return False

    def on_session_expired(self, callback: Callable[[], None]) -> Callable[[], None]:
        """See :meth:`MetadataStore.on_session_expired`; the callback runs on the store's
        event thread."""
        token = next(self._tokens)
        with self._lock:
            self._expiry_listeners[token] = callback

        def cancel() -> None:
            with self._lock:
                self._expiry_listeners.pop(token, None)

        return cancel

    def _cancel_expiry_timer(self) -> None:
        timer, self._expiry_timer = self._expiry_timer, None
        if timer is not None:
            timer.cancel()

    def _presume_expired(self) -> None:
        if self._client.state != KazooState.CONNECTED and not self._closed:
            log.warning(
                "no ZooKeeper contact for %gs (the session timeout): session presumed expired",
                self._config.session_timeout,
            )
            self._session_expired()

    def _session_expired(self) -> None:
        with self._lock:
            listeners, self._expiry_listeners = list(self._expiry_listeners.values()), {}
        for callback in listeners:
            self._submit(callback)

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # raised once the store is closing
            self._events.submit(fn, *args)

    def _after_connect(self, session_lost: bool) -> None:
        """Re-create liveness records after a new session, then re-arm and fire watches."""
        if session_lost:
            with self._lock:
                registered = dict(self._registered)
            for path, data in registered.items():
                try:
                    self._reregister(path, data)
                    log.warning("ZooKeeper session expired; re-registered %s", path)
                except Exception:
                    log.exception("could not re-register %s after session expiry", path)
        with self._lock:
            paths = list(self._watches)
        for path in paths:
            self._arm_and_fire(path, None)

    def _reregister(self, path: str, data: bytes) -> None:
        full = self._full(path)
        for attempt in Retrying(
            retry=retry_if_exception(_is_connection_error),
            stop=stop_after_delay(self._call_timeout),
            wait=wait_exponential(multiplier=0.05, max=1.0),
            reraise=True,
        ):
            with attempt:
                self._call(lambda: self._create_ephemeral(full, data), path)

    # -- watches -------------------------------------------------------------------------

    def watch(self, path: str, callback: WatchCallback) -> Callable[[], None]:
        """Call ``callback`` (on the event thread) once now and after every change."""
        check_path(path)
        token = next(self._tokens)
        with self._lock:
            if self._closed:
                raise self._closed_error()
            self._watches.setdefault(path, {})[token] = callback
        self._submit(self._arm_and_fire, path, token)

        def unsubscribe() -> None:
            with self._lock:
                callbacks = self._watches.get(path)
                if callbacks is not None:
                    callbacks.pop(token, None)
                    if not callbacks:
                        # A pending one-shot watch finds no callbacks and is not re-armed.
                        del self._watches[path]
                        self._handlers.pop(path, None)

        return unsubscribe

    def _handler(self, path: str) -> Callable[[WatchedEvent], None]:
        # One callable per path, so kazoo (which keeps watchers in sets) holds it once.
        with self._lock:
            handler = self._handlers.get(path)
            if handler is None:

                def handler(event: WatchedEvent) -> None:
                    # Runs on kazoo's thread. NONE events mean the connection dropped; the
                    # CONNECTED listener re-arms everything then.
                    if event.type != EventType.NONE:
                        self._submit(self._arm_and_fire, path, None)

                self._handlers[path] = handler
            return handler

    def _arm_and_fire(self, path: str, only: int | None) -> None:
        """Arm the one-shot watches of ``path`` again, then run its callbacks."""
        with self._lock:
            callbacks = dict(self._watches.get(path, {}))
        if only is not None:
            callbacks = {only: callbacks[only]} if only in callbacks else {}
        if not callbacks:
            return
        full, handler = self._full(path), self._handler(path)
        try:
            if self._wait(self._client.exists_async(full, watch=handler)) is not None:
                self._wait(self._client.get_children_async(full, watch=handler))
        except NoNodeError:
            pass  # deleted in between: the exists watch fires for it
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("could not arm the watch on %s (%r); re-armed on reconnect", path, exc)
        for token, callback in callbacks.items():
            with self._lock:
                if token not in self._watches.get(path, {}):
                    continue  # unsubscribed meanwhile
            try:
                callback()
            except Exception:
                log.exception("metadata watch callback for %s failed", path)

    # -- closing -------------------------------------------------------------------------

    def _shutdown(self) -> None:
        self._closed = True
        self._cancel_expiry_timer()
        try:
            self._client.stop()  # the server deletes this session's ephemeral records
            self._client.close()
        finally:
            self._events.shutdown(wait=False, cancel_futures=True)
            self._calls.shutdown(wait=False, cancel_futures=True)

    async def close(self) -> None:
        """End the session; this store's ephemeral records disappear."""
        if self._closed:
            return
        with self._lock:
            self._registered.clear()
            self._watches.clear()
        await asyncio.to_thread(self._shutdown)


__all__ = ["COUNTERS", "ZooKeeperStore"]
