"""One home per bookie setting: settings of the storage engine, compaction and disk
thresholds reach the flags with their own name, unit, default and help."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from bookie.config import BookieConfig
from bookie.disks import DiskThresholds
from bookie.main import build_parser, parse_config
from bookie.storage.compaction import CompactionPolicy
from bookie.storage.config import StorageConfig
from walog.config import ClientConfig
from walog.config_file import HELP, OWNER
from walog.wire.limits import DEFAULT_MAX_ENTRY_BYTES

BASE = ["--data-dir", "/d", "--listen", "127.0.0.1:3181", "--metadata", "sqlite:///m.db"]


def test_a_bookie_from_flags_accepts_a_little_more_than_a_client_sends() -> None:
    config, _ = parse_config(BASE)
    client_largest = ClientConfig().max_entry_bytes
    assert client_largest == DEFAULT_MAX_ENTRY_BYTES
    assert config.max_entry_bytes > client_largest
    assert config.storage_config().max_entry_bytes == StorageConfig(Path("/d")).max_entry_bytes


def test_no_setting_changes_its_name_or_unit_on_the_way_to_the_storage() -> None:
    config, _ = parse_config(
        [*BASE, "--group-wait-s", "0.25", "--checkpoint-interval-s", "7",
         "--minor-compaction-interval-s", "30", "--disk-usage-threshold", "0.97"],
    )  # fmt: skip
    storage = config.storage_config()
    owners = {StorageConfig: storage, CompactionPolicy: storage.compaction}
    owners[DiskThresholds] = config.disk_thresholds()
    for field in dataclasses.fields(BookieConfig):
        owner = field.metadata.get(OWNER)
        if owner is not None:
            assert getattr(owners[owner], field.name) == getattr(config, field.name), field.name
    assert (storage.group_wait_s, storage.checkpoint_interval_s) == (0.25, 7.0)
    assert storage.compaction.minor_compaction_interval_s == 30.0


def test_derived_settings_take_the_default_and_help_of_their_owner() -> None:
    actions = {a.dest: a for a in build_parser()._actions if a.help != argparse.SUPPRESS}
    derived = [f for f in dataclasses.fields(BookieConfig) if OWNER in f.metadata]
    assert {f.metadata[OWNER] for f in derived} == {StorageConfig, CompactionPolicy, DiskThresholds}
    for field in derived:
        own = {f.name: f for f in dataclasses.fields(field.metadata[OWNER])}[field.name]
        assert field.default == own.default, field.name
        help_text = actions[field.name].help or ""
        assert help_text.startswith(own.metadata[HELP].replace("%", "%%")), field.name


def test_every_duration_and_size_has_its_unit_in_its_name() -> None:
    for field in dataclasses.fields(BookieConfig):
        help_text = field.metadata[HELP]
        if field.type in ("float", "float | None") and "threshold" not in field.name:
            assert field.name.endswith("_s"), field.name
        assert "seconds" not in help_text or field.name.endswith("_s"), field.name
    sizes = [f.name for f in dataclasses.fields(BookieConfig) if f.name.endswith("_bytes")]
    assert {"max_entry_bytes", "group_max_bytes", "compaction_rate_bytes"} <= set(sizes)


def test_old_flag_spellings_still_work_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = parse_config(
        [*BASE, "--group-wait-ms", "2", "--checkpoint-interval", "3", "--gc-grace", "4"],
    )
    assert (config.group_wait_s, config.checkpoint_interval_s, config.gc_grace_s) == (
        0.002,
        3.0,
        4.0,
    )
    err = capsys.readouterr().err
    assert "--group-wait-ms is deprecated; use --group-wait-s" in err
    assert "--checkpoint-interval is deprecated; use --checkpoint-interval-s" in err
    assert "--group-wait-ms" not in build_parser().format_help()


def test_the_flag_table_of_the_docs_names_every_flag_with_its_default() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "bookies.md").read_text()
    documented: dict[str, str] = {}
    for line in docs.splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) == 3 and cells[0].startswith("`--"):
            for flag in re.findall(r"`(--[a-z-]+)", cells[0]):
                documented[flag] = cells[1]
    actions = {
        a.option_strings[0]: a
        for a in build_parser()._actions
        if a.option_strings[0].startswith("--") and a.help != argparse.SUPPRESS
    }
    assert set(documented) == set(actions) - {"--help", "--version"}
    for flag, default in documented.items():
        number = re.match(r"^(-?\d+(?:\.\d+)?)\b", default)
        if number is not None:
            assert float(number.group(1)) == actions[flag].default, flag
        assert (default == "required") == actions[flag].required, flag
