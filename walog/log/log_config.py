"""A log's stored configuration: :class:`LogConfig` and the pure rules around it.

The configuration lives in the log's metadata record (``"config"``, see
:mod:`walog.log.log_metadata`), is set when the log is created and changed by
compare-and-swap, so every writer, reader and maintenance process of the log uses the same
settings. A record without it (a log created before the log kept its settings) reads as
:data:`DEFAULT_CONFIG`.

Settings are named by flat keys (``ensemble_size``, ``roll.max_bytes``,
``retention.max_age``, ``archive.to``...): :func:`config_keys` lists them,
:meth:`LogConfig.with_settings` changes them from text as ``walog log config NAME --set
KEY=VALUE`` gives it, and :func:`resolve` checks what a process passes against what is
stored. No I/O in here.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from typing import Any

from walog.ledger.options import check_ledger_options
from walog.log.log_metadata import LogMetadata
from walog.log.retention import RetentionPolicy, RollPolicy
from walog.wire.durability import Durability
from walog.wire.limits import DEFAULT_MAX_ENTRY_BYTES


@dataclasses.dataclass(frozen=True)
class ArchivePolicy:
    """Where and how often ``walog maintain`` archives a log's closed ledgers (to Parquet,
    with the Spark archive job, ``walog.spark.archive``).

    Attributes:
        to: the archive root directory; None: the log is not archived by the service.
        interval_s: seconds between two archive runs of the log; None: every pass of the
            service.
    """

    to: str | None = None
    interval_s: float | None = None

    def __post_init__(self) -> None:
        if self.to is not None and (not isinstance(self.to, str) or not self.to.strip()):
            raise ValueError(f"ArchivePolicy.to must be a directory path or None, got {self.to!r}")
        if self.to is not None and "://" in self.to:
            raise ValueError(f"ArchivePolicy.to must be a directory path, not a URI: {self.to!r}")
        value = self.interval_s
        if value is not None and (isinstance(value, bool) or not value > 0):
            raise ValueError(f"ArchivePolicy.interval_s must be > 0 or None, got {value!r}")

    @property
    def enabled(self) -> bool:
        """True when the service archives the log."""
        return self.to is not None


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """The settings stored with a log; every process that opens it uses them.

    Attributes:
        ensemble_size: bookies each ledger of the log is striped over.
        write_quorum: copies of each entry.
        ack_quorum: acknowledgements an append waits for.
        durability: when a bookie acknowledges (``Durability.PERSISTENT``: once synced).
        max_entry_bytes: the largest entry the log's writers make; a record must fit in
            one entry with its overhead.
        roll: when a writer closes its ledger and continues in a new one.
        retention: which old ledgers are deleted, by the writer after each roll and by
            ``walog maintain``.
        archive: where and how often ``walog maintain`` archives the log.
    """

    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    durability: Durability = Durability.PERSISTENT
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
    roll: RollPolicy = dataclasses.field(default_factory=RollPolicy)
    retention: RetentionPolicy = dataclasses.field(default_factory=RetentionPolicy)
    archive: ArchivePolicy = dataclasses.field(default_factory=ArchivePolicy)

    def __post_init__(self) -> None:
        check_ledger_options(
            self.ensemble_size, self.write_quorum, self.ack_quorum, self.durability
        )
        if not isinstance(self.max_entry_bytes, int) or isinstance(self.max_entry_bytes, bool):
            raise TypeError(
                f"LogConfig.max_entry_bytes must be an int, got {self.max_entry_bytes!r}"
            )
        if self.max_entry_bytes <= 0:
            raise ValueError(f"LogConfig.max_entry_bytes must be > 0, got {self.max_entry_bytes}")
        for name, kind in (("roll", RollPolicy), ("retention", RetentionPolicy)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"LogConfig.{name} must be a {kind.__name__}")
        if not isinstance(self.archive, ArchivePolicy):
            raise ValueError("LogConfig.archive must be an ArchivePolicy")

    def settings(self) -> dict[str, Any]:
        """Every setting by its key (``retention.max_age``...), in key order."""
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if dataclasses.is_dataclass(value):
                for inner in dataclasses.fields(value):
                    out[f"{field.name}.{inner.name}"] = getattr(value, inner.name)
            else:
                out[field.name] = value
        return out

    def to_doc(self) -> dict[str, Any]:
        """The JSON form stored in the log's record."""
        doc: dict[str, Any] = {}
        for key, value in self.settings().items():
            group, _, name = key.rpartition(".")
            target = doc.setdefault(group, {}) if group else doc
            target[name] = value.value if isinstance(value, Durability) else value
        return doc

    @classmethod
    def from_doc(cls, doc: object) -> LogConfig:
        """Parse :meth:`to_doc`'s form.

        Raises:
            ValueError: not a configuration this version reads; the message names the key.
        """
        if not isinstance(doc, dict):
            raise ValueError(f"log config is a JSON object, got {type(doc).__name__}")
        flat: dict[str, object] = {}
        for name, value in doc.items():
            if isinstance(value, dict):
                flat.update({f"{name}.{k}": v for k, v in value.items()})
            else:
                flat[name] = value
        return DEFAULT_CONFIG.with_settings(flat)

    def with_settings(self, changes: Mapping[str, object]) -> LogConfig:
        """A copy with the settings of ``changes`` (key -> value) replaced.

        A value may be the text ``walog log config --set KEY=VALUE`` takes: ``none`` for no
        limit, ``true``/``false``, a number, a durability's name.

        Raises:
            ValueError: an unknown key, or a value that key does not take (the message names
                the key).
        """
        known = self.settings()
        parts: dict[str, dict[str, Any]] = {}
        top: dict[str, Any] = {}
        for key, raw in changes.items():
            if key not in known:
                raise ValueError(f"unknown log setting {key!r}; known: {', '.join(known)}")
            try:
                value = _parse(key, raw)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"log setting {key}: {exc}") from None
            group, _, name = key.rpartition(".")
            (parts.setdefault(group, {}) if group else top)[name] = value
        try:
            for group, values in parts.items():
                top[group] = dataclasses.replace(getattr(self, group), **values)
            return dataclasses.replace(self, **top)
        except (TypeError, ValueError) as exc:
            keys = ", ".join(changes)
            raise ValueError(f"log setting {keys}: {exc}") from None


DEFAULT_CONFIG = LogConfig()
"""Today's defaults: what a log whose record holds no configuration uses."""


def _setting_types() -> dict[str, tuple[type, bool]]:
    """Each key's type, and whether it may be None, read from the dataclasses' annotations."""
    out: dict[str, tuple[type, bool]] = {}

    def add(prefix: str, cls: type) -> None:
        for name, hint in typing.get_type_hints(cls).items():
            args = typing.get_args(hint)
            if not args:
                out[prefix + name] = (hint, False)
            elif dataclasses.is_dataclass(args[0]):
                continue
            else:
                kinds = [a for a in args if a is not type(None)]
                out[prefix + name] = (kinds[0], len(kinds) < len(args))

    for field in dataclasses.fields(LogConfig):
        value = getattr(DEFAULT_CONFIG, field.name)
        if dataclasses.is_dataclass(value):
            add(f"{field.name}.", type(value))
    add("", LogConfig)
    return {key: out[key] for key in DEFAULT_CONFIG.settings()}


_TYPES = _setting_types()
"""Each setting's type and whether it may be None (``--set KEY=none``)."""


def config_keys() -> list[str]:
    """Every key of :class:`LogConfig`, as ``--set`` takes them."""
    return list(DEFAULT_CONFIG.settings())


def _parse(key: str, raw: object) -> Any:
    """``raw`` (a value, or the text of one) as the value of ``key``."""
    kind, nullable = _TYPES[key]
    text = raw.strip() if isinstance(raw, str) else None
    if raw is None or (text is not None and text.lower() in ("none", "null", "")):
        if nullable:
            return None
        raise ValueError("cannot be none")
    if kind is Durability:
        if isinstance(raw, Durability):
            return raw
        name = str(raw).strip().upper()
        if name not in Durability.__members__:
            raise ValueError(f"expected one of {', '.join(Durability.__members__)}, got {raw!r}")
        return Durability[name]
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if text is not None and text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ValueError(f"expected true or false, got {raw!r}")
    if kind is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if text is not None:
            try:
                return int(text)
            except ValueError:
                pass
        raise ValueError(f"expected an integer, got {raw!r}")
    if kind is float:
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            value = float(raw)
        elif text is not None:
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"expected a number of seconds, got {raw!r}") from None
        else:
            raise ValueError(f"expected a number of seconds, got {raw!r}")
        if not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {raw!r}")
        return value
    if isinstance(raw, str):
        return raw
    raise ValueError(f"expected text, got {raw!r}")


def stored_config(meta: LogMetadata) -> LogConfig | None:
    """The configuration stored in a log's record; None for a record without one.

    Raises:
        ValueError: the stored configuration does not parse (the message names the key).
    """
    return None if meta.config is None else LogConfig.from_doc(meta.config)


def effective_config(meta: LogMetadata) -> LogConfig:
    """What a log's record says to use: its configuration, or the defaults without one."""
    return stored_config(meta) or DEFAULT_CONFIG


def differences(stored: LogConfig, wanted: LogConfig, keys: list[str]) -> list[str]:
    """The keys among ``keys`` whose value differs between the two, as
    ``key: stored X, given Y`` (empty when they agree)."""
    a, b = stored.settings(), wanted.settings()
    return [f"{k}: stored {_show(a[k])}, given {_show(b[k])}" for k in keys if a[k] != b[k]]


def _show(value: object) -> str:
    if isinstance(value, Durability):
        return value.value
    return "none" if value is None else str(value)


def resolve(
    name: str,
    stored: LogConfig | None,
    given: Mapping[str, object],
    *,
    override: bool = False,
) -> LogConfig:
    """The configuration a process uses for log ``name``.

    ``given`` holds the settings the process passed explicitly (key -> value; a whole
    policy gives every key of its group). When the log stores a configuration, that is
    used, and a given setting that differs from it is an error unless ``override``; a
    log without one (created before logs kept their settings) uses the defaults with the
    given settings, as then.

    Raises:
        ValueError: a given setting differs from the stored one (the message names it).
    """
    if stored is None:
        return DEFAULT_CONFIG.with_settings(given)
    wanted = stored.with_settings(given)
    if override:
        return wanted
    diff = differences(stored, wanted, list(given))
    if diff:
        raise ValueError(
            f"log {name!r} stores other settings than this process gives ({'; '.join(diff)}): "
            f"leave them out to use the stored ones, or change them with "
            f"'walog log config {name} --set KEY=VALUE'"
        )
    return stored


def given_settings(
    *,
    ensemble_size: int | None = None,
    write_quorum: int | None = None,
    ack_quorum: int | None = None,
    durability: Durability | None = None,
    max_entry_bytes: int | None = None,
    roll: RollPolicy | None = None,
    retention: RetentionPolicy | None = None,
) -> dict[str, object]:
    """The settings a caller passed (those not None), by key, for :func:`resolve`."""
    out: dict[str, object] = {}
    for key, value in (
        ("ensemble_size", ensemble_size),
        ("write_quorum", write_quorum),
        ("ack_quorum", ack_quorum),
        ("durability", durability),
        ("max_entry_bytes", max_entry_bytes),
    ):
        if value is not None:
            out[key] = value
    for group, policy in (("roll", roll), ("retention", retention)):
        if policy is not None:
            out.update({f"{group}.{f.name}": getattr(policy, f.name) for f in _fields(policy)})
    return out


def _fields(policy: object) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(policy)  # type: ignore[arg-type]


__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_MAX_ENTRY_BYTES",
    "ArchivePolicy",
    "LogConfig",
    "config_keys",
    "differences",
    "effective_config",
    "given_settings",
    "resolve",
    "stored_config",
]
