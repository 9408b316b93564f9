"""Cookies: a bookie that lost its disk state must not rejoin silently (docs/protocol.md,
"Cookies").

A cookie names one incarnation of a bookie: a random instance id, the bookie id and the
directories it stores data in. At the first start it is written to every directory of the
bookie (``cookie.json``, fsynced) and to the metadata store at ``cookie_path(bookie_id)``.
At every start all copies must exist and match:

- no copy anywhere: a brand-new bookie; it is formatted automatically;
- the metadata store has a cookie but a directory has none: the disk was wiped or replaced
  and lost entries this bookie acknowledged; refuse (the operator decommissions the bookie,
  or formats it as a new, empty one with ``--allow-format``);
- a directory has a cookie but the metadata store has none, or the copies differ (another
  bookie's disk, moved directories, a different metadata store): refuse likewise.

``--allow-format`` makes a fresh instance id and rewrites every copy. It never deletes data.
Where a directory no longer holds the incarnation the metadata store names (wiped, replaced,
foreign or stale disk), ``--allow-format`` alone is refused too: the formatted bookie would
answer "no such entry" under its old id for entries that incarnation acknowledged, and
recovery counts such answers as proof of absence (docs/protocol.md, "What counts as
absent"), so it could close a ledger
short of acknowledged entries. The operator must also name the lost incarnation with
``--discard-instance ID``, after re-replicating its ledgers; the safe alternatives are a
new bookie id, or decommissioning the old one (which deletes its metadata cookie).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import uuid
from pathlib import Path

from bookie.config import BookieConfig
from walog.errors import CookieMismatchError
from walog.format_versions import check_version
from walog.metadata.layout import cookie_path, decommission_path
from walog.metadata.store import MetadataStore, NodeExistsError, NodeNotFoundError

COOKIE_FILE = "cookie.json"
COOKIE_FORMAT = 1
"""The cookie format this bookie writes, and the newest it reads."""


@dataclasses.dataclass(frozen=True)
class Cookie:
    """One incarnation of a bookie: who it is and where its data lives."""

    instance_id: str
    bookie_id: str
    journal_dir: str
    data_dir: str
    format: int = COOKIE_FORMAT

    @classmethod
    def new(cls, config: BookieConfig) -> Cookie:
        """A cookie with a fresh instance id for the bookie described by ``config``."""
        return cls(
            instance_id=str(uuid.uuid4()),
            bookie_id=config.bookie_id,
            journal_dir=str(config.journal_path.resolve()),
            data_dir=str(config.data_dir.resolve()),
        )

    def to_json(self) -> bytes:
        """Serialise (sorted keys, so equal cookies have equal bytes)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Cookie:
        """Parse a cookie; ``where`` names its location in the error message.

        Raises:
            CookieMismatchError: the bytes are not a cookie, or one of a newer format
                than :data:`COOKIE_FORMAT` (the message names both versions).
        """
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise CookieMismatchError(f"the cookie at {where} is unreadable: {exc}") from exc
        if not isinstance(doc, dict):
            raise CookieMismatchError(f"the cookie at {where} is unreadable: not a JSON object")
        # The version first: a newer cookie may have fields this version does not know.
        check_version(
            f"the cookie at {where}",
            doc.get("format", COOKIE_FORMAT),
            COOKIE_FORMAT,
            CookieMismatchError,
            upgrade="the bookie",
        )
        try:
            return cls(**doc)
        except TypeError as exc:
            raise CookieMismatchError(f"the cookie at {where} is unreadable: {exc}") from exc

    def differences(self, other: Cookie) -> list[str]:
        """Human-readable ``field: a != b`` for every field that differs."""
        return [
            f"{field.name}: {getattr(self, field.name)!r} != {getattr(other, field.name)!r}"
            for field in dataclasses.fields(self)
            if getattr(self, field.name) != getattr(other, field.name)
        ]


def cookie_dirs(config: BookieConfig) -> list[Path]:
    """Every directory that holds a copy of the cookie: the data dir, and the journal dir
    when it is set apart (then it may be on another disk, lost on its own)."""
    dirs = [config.data_dir]
    if config.journal_dir is not None and config.journal_dir.resolve() != config.data_dir.resolve():
        dirs.append(config.journal_dir)
    return dirs


def _read_disk_cookie(directory: Path) -> Cookie | None:
    path = directory / COOKIE_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CookieMismatchError(f"cannot read the cookie {path}: {exc}") from exc
    return Cookie.from_json(raw, str(path))


def _write_disk_cookie(directory: Path, cookie: Cookie) -> None:
    # Write, fsync, rename, fsync the directory: a crash leaves the old cookie or the new
    # one, never a torn file that would make the next start refuse for the wrong reason.
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / COOKIE_FILE
    tmp = directory / (COOKIE_FILE + ".tmp")
    with open(tmp, "wb") as f:
        f.write(cookie.to_json())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _refusal(config: BookieConfig, problem: str, lost: Cookie | None) -> CookieMismatchError:
    if lost is None:
        fix = (
            "If the directories only moved or the metadata store changed, and no data was "
            "lost, start it with --allow-format to record a new cookie"
        )
    else:
        fix = (
            f"This disk lost incarnation {lost.instance_id}: formatting it under the same "
            f"bookie id would make it answer 'no such entry' for entries that incarnation "
            f"acknowledged, and recovery takes such answers as proof that an entry does not "
            f"exist, so acknowledged entries could be lost. Safe ways back: start the empty "
            f"disk under a new bookie id (another --listen address), or decommission "
            f"{config.bookie_id} first (re-replicate its ledgers, then delete the metadata "
            f"cookie {cookie_path(config.bookie_id)}). Only once every ledger it was part of "
            f"is fully replicated elsewhere, --allow-format --discard-instance "
            f"{lost.instance_id} formats it in place"
        )
    return CookieMismatchError(
        f"bookie {config.bookie_id}: {problem}. A bookie whose disk does not match its "
        f"cookie must not rejoin on its own: it may have lost entries it acknowledged. {fix}"
    )


async def _format(store: MetadataStore, config: BookieConfig, version: int | None) -> Cookie:
    cookie = Cookie.new(config)
    # Disk first: a crash before the metadata write leaves "disk without metadata", which
    # refuses with a clear message; the reverse order would look like a lost disk.
    for directory in cookie_dirs(config):
        await asyncio.to_thread(_write_disk_cookie, directory, cookie)
    path = cookie_path(config.bookie_id)
    if version is None:
        try:
            await store.create(path, cookie.to_json())
        except NodeExistsError as exc:
            raise CookieMismatchError(
                f"bookie {config.bookie_id}: another process wrote the cookie {path} while "
                f"this bookie was formatting; is the same bookie id started twice?"
            ) from exc
    else:
        await store.set(path, cookie.to_json(), version)
    # A new bookie under the id of a decommissioned one must not inherit its drain mark.
    with contextlib.suppress(NodeNotFoundError):
        await store.delete(decommission_path(config.bookie_id))
    return cookie


async def check_cookie(store: MetadataStore, config: BookieConfig) -> Cookie:
    """Verify this bookie's cookies, formatting a brand-new bookie; return the cookie.

    Args:
        store: the metadata store the bookie registers in.
        config: the bookie's settings (id, directories, ``allow_format``).

    Returns:
        The cookie in force (its ``instance_id`` is reported by ``Info``).

    Raises:
        CookieMismatchError: the disk and the metadata store disagree and
            ``config.allow_format`` is not set; the message says what differs and how to
            re-add the bookie.
    """
    path = cookie_path(config.bookie_id)
    try:
        raw, version = await store.get(path)
        meta: Cookie | None = Cookie.from_json(raw, f"metadata {path}")
        meta_version: int | None = version
    except NodeNotFoundError:
        meta, meta_version = None, None
    disk = {d: await asyncio.to_thread(_read_disk_cookie, d) for d in cookie_dirs(config)}

    if meta is None and all(c is None for c in disk.values()):
        return await _format(store, config, None)

    expected = Cookie.new(config)
    problems: list[str] = []
    if meta is None:
        problems.append(f"the metadata store has no cookie at {path} but the disk has one")
    for directory, cookie in disk.items():
        if cookie is None:
            holder = (
                f"the metadata store has a cookie (instance {meta.instance_id})"
                if meta is not None
                else "another directory of this bookie has one"
            )
            problems.append(
                f"{directory} has no {COOKIE_FILE} but {holder}: this disk lost its state "
                f"(wiped or replaced)"
            )
            continue
        # Identity and directories must be this bookie's; the instance must be the
        # metadata store's (a foreign or older disk carries another instance id).
        reference = dataclasses.replace(expected, instance_id=cookie.instance_id)
        diffs = cookie.differences(reference)
        if meta is not None:
            diffs += [d for d in cookie.differences(meta) if d.startswith("instance_id")]
        if diffs:
            problems.append(f"the cookie in {directory} does not match: " + "; ".join(diffs))
    if meta is not None:
        meta_diffs = meta.differences(dataclasses.replace(expected, instance_id=meta.instance_id))
        if meta_diffs:
            problems.append(
                f"the metadata cookie {path} does not match this bookie: " + "; ".join(meta_diffs)
            )

    if not problems:
        assert meta is not None
        return meta
    # The incarnation the metadata store names is lost when a directory does not carry it.
    lost = (
        meta
        if meta is not None
        and any(c is None or c.instance_id != meta.instance_id for c in disk.values())
        else None
    )
    if config.allow_format and (lost is None or config.discard_instance == lost.instance_id):
        return await _format(store, config, meta_version)
    if config.allow_format and config.discard_instance is not None:
        problems.append(
            f"--discard-instance {config.discard_instance} does not name the lost "
            f"incarnation {lost.instance_id if lost else '?'}"
        )
    raise _refusal(config, "; ".join(problems), lost)


__all__ = ["COOKIE_FILE", "Cookie", "check_cookie", "cookie_dirs"]
