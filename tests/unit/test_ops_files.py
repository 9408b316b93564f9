"""The files shipped for operators: every query of the Grafana dashboard is valid PromQL
over metric names walog exports (promtool parses them; the names are checked here)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

OPS = Path(__file__).resolve().parents[2] / "docs" / "ops"
DOCS = OPS.parent / "operations.md"


def _dashboard_queries() -> list[str]:
    dashboard = json.loads((OPS / "walog-dashboard.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_every_dashboard_query_parses_as_promql(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: apt-get install -y prometheus (./test does this)")
    # promtool parses the expressions of recording rules: one rule per query.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"walog:q{i}", "expr": q} for i, q in enumerate(_dashboard_queries())
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dashboard_and_alerts_use_only_documented_metrics() -> None:
    documented = DOCS.read_text()
    texts = [*_dashboard_queries(), (OPS / "walog-alerts.yml").read_text()]
    names = {n for text in texts for n in re.findall(r"\bwalog_[a-z_]+", text)}
    assert names
    for name in sorted(names):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        short = re.sub(r"^walog_(bookie|client|autorecovery)_", "", base)
        assert f"`{short}" in documented or f"{short}`" in documented or base in documented, name
