"""The hosts scenario of ``walog bench``: selected by --hosts, rendered next to loopback."""

from __future__ import annotations

from walog.bench.command import SCENARIOS, build_parser
from walog.bench.sections import hosts_section

RESULTS = {
    "loopback6_append_eps": 20_000,
    "hosts_append_eps": 15_000,
    "loopback6_append_p50_ms": 1.2,
    "hosts_append_p50_ms": 1.5,
    "loopback6_append_p99_ms": 4.0,
    "hosts_append_p99_ms": 6.0,
}


def test_the_hosts_section_sets_each_figure_between_hosts_beside_loopback() -> None:
    lines = hosts_section(RESULTS)
    assert lines[0] == "## Between hosts"
    assert "| append, pipelined (entries/s) | 20,000 | 15,000 |" in lines
    assert "| one in flight, p99 (ms) | 4 | 6 |" in lines


def test_no_hosts_section_without_both_measurements() -> None:
    assert hosts_section({"loopback6_append_eps": 1}) == []


def test_hosts_is_a_scenario_of_a_full_run_and_the_only_one_with_the_flag() -> None:
    assert "hosts" in SCENARIOS
    assert build_parser().parse_args(["--hosts"]).hosts
