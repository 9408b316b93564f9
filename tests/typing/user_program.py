"""A small program as a user of walog writes it; tests/unit/test_typed_api.py runs mypy
--strict on it and reads the revealed types. Never run: type-checked only."""

from __future__ import annotations

from typing import reveal_type

import walog
import walog.aio


def main(uri: str) -> None:
    config = walog.ClientConfig(timeouts=walog.Timeouts(add=5.0))
    with walog.connect(uri, config=config) as client:
        reveal_type(walog.connect)
        reveal_type(client)
        writer = client.create_ledger(3, 3, 2, durability=walog.Durability.VOLATILE)
        reveal_type(writer.append(b"entry"))
        log = client.open_log("orders", roll_policy=walog.RollPolicy(max_entries=100))
        with log.open_writer(walog.LogWriterConfig(linger=0.001)) as log_writer:
            position = log_writer.append(b"record")
            reveal_type(position)
        with log.open_reader(position) as reader:
            record = reader.read_next(timeout=1.0)
            reveal_type(record)
    try:
        pass
    except walog.MetadataError as exc:
        reveal_type(exc)
    except walog.BookieUnavailableError as exc:
        reveal_type(exc)
    reveal_type(walog.aio.connect)
    reveal_type(walog.TlsConfig)
