"""``walog autorecovery --config FILE``: the same keys as its flags, flags win over the
environment, which wins over the file; ``--print-config`` names each value's source and
never shows a password; a bad file is one line naming the file and the key, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from walog.autorecovery.command import main


def _settings(out: str) -> dict[str, tuple[str, str]]:
    """``key -> (value, source)`` of the printed settings (value "" for a key not set)."""
    found: dict[str, tuple[str, str]] = {}
    for line in out.splitlines():
        if line.startswith("# -- ") or not line or line.startswith("# ("):
            continue
        body, source = line.rsplit("  # ", 1)
        if body.startswith("# "):  # "# key: not set" or "# key: set, not shown"
            found[body[2:].split(":")[0]] = ("", source)
        else:
            key, value = body.split(" = ", 1)
            found[key] = (value, source)
    return found


def test_print_config_names_each_source_and_never_shows_a_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WALOG_METADATA", "sqlite:///env.db")
    path = tmp_path / "autorecovery.toml"
    path.write_text(
        'metadata = "sqlite:///file.db"\ninterval = 30\nlost-after = 600\n'
        'password = ["s3cret"]\nplacement = "random"\n'
    )
    assert main(["--config", str(path), "--lost-after", "900", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "s3cret" not in out
    settings = _settings(out.split("\n", 2)[2])
    assert settings["metadata"] == ('"sqlite:///env.db"', "environment WALOG_METADATA")
    assert settings["interval"] == ("30.0", "file")
    assert settings["lost-after"] == ("900.0", "flag")
    assert settings["placement"] == ('"random"', "file")
    assert settings["password"] == ("", "file")
    assert settings["timeout"] == ("10.0", "default")
    monkeypatch.delenv("WALOG_METADATA")
    assert main(["--config", str(path), "--print-config"]) == 0
    assert '"sqlite:///file.db"  # file' in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("intervall = 3\n", "unknown key 'intervall' (did you mean 'interval'?)"),
        ('interval = "often"\n', "key 'interval': expected a number, got a string"),
        ('password = "one"\n', "key 'password': expected a list, got a string"),
        ("verify-percent = 150\n", "key 'verify-percent': must be between 0 and 100"),
        ('placement = "anywhere"\n', "key 'placement': expected one of"),
        ("interval = 0\n", "--interval and --timeout must be > 0 and --lost-after >= 0 "
         "(key 'interval' of {path})"),
    ],
)  # fmt: skip
def test_a_bad_file_is_refused_in_one_line_naming_the_file_and_the_key(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    problem: str,
) -> None:
    monkeypatch.setenv("WALOG_METADATA", "sqlite:///env.db")
    path = tmp_path / "autorecovery.toml"
    path.write_text(text)
    with pytest.raises(SystemExit) as exited:
        main(["--config", str(path), "--print-config"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("walog: error: "), err
    assert problem.format(path=path) in err and str(path) in err, err
