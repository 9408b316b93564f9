"""walog as users get it: ``python -m build`` makes an sdist and a wheel, each installs into a
fresh virtualenv and runs ``walog quickstart`` (real bookie processes, started by the
installed package), the sdist installs where no C compiler exists and its bookies run the
pure-Python hot paths with one warning, and an editable install is seen by type checkers.

Each test builds from a copy of the package's sources (never in the repository, whose
compiled extensions running bookies may have mapped) and installs with this environment's
pip into a virtualenv of its own. That virtualenv borrows walog's dependencies from this
environment through a ``.pth`` file, after its own site-packages: tests reach no package
index, and walog itself comes only from what was installed.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("walog", "bookie", "pyproject.toml", "setup.py", "README.md")
"""What a build reads: the packages, their build files and the README of the metadata."""
BOOKIE_EXTENSIONS = ("_fastadd", "_fastjournal", "_fastreplay")
"""The bookie's compiled hot paths (bookie/storage/_fast*.c), optional extensions."""
EXTENSIONS = (*(f"bookie.storage.{name}" for name in BOOKIE_EXTENSIONS), "walog.log._fastrecords")
"""Every optional extension: the bookie's and the log writer's per-record path."""
PURE_PYTHON_WARNING = "compiled hot paths not built"


def _run(cmd: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run ``cmd``; its output, or a test failure holding it."""
    done = subprocess.run(
        [str(part) for part in cmd],
        cwd=cwd,
        env=env if env is not None else _env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _env(**extra: str) -> dict[str, str]:
    """This environment without ``PYTHONPATH``: what runs sees only what is installed."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WALOG_METADATA")}
    env.update(extra)
    return env


def _sources(dest: Path) -> Path:
    """A copy of the package's sources, without caches or built extensions."""
    ignore = shutil.ignore_patterns("__pycache__", "*.so", ".mypy_cache", "*.egg-info")
    for name in SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore)
        else:
            shutil.copy2(source, dest / name)
    return dest


def _build(tmp_path: Path, *flags: str) -> dict[str, Path]:
    """``python -m build`` of a copy of the sources: the artifacts, by kind."""
    if importlib.util.find_spec("build.__main__") is None:
        pytest.fail("the 'build' package is missing: install walog's dev extra", pytrace=False)
    sources = _sources(tmp_path / "sources")
    out = tmp_path / "dist"
    # --no-isolation: setuptools comes from this environment (the dev extra), not an index.
    _run([sys.executable, "-m", "build", "--no-isolation", *flags, "--outdir", out, sources],
         cwd=tmp_path, env=dict(os.environ))  # fmt: skip
    artifacts = {"sdist": list(out.glob("*.tar.gz")), "wheel": list(out.glob("*.whl"))}
    return {kind: found[0] for kind, found in artifacts.items() if found}


def _fresh_venv(path: Path) -> Path:
    """A new virtualenv at ``path`` that borrows walog's dependencies; its python."""
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", "--without-pip", path], cwd=path.parent)
    python = path / "bin" / "python"
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                cwd=path).strip()  # fmt: skip
    borrowed = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "walog-test-dependencies.pth").write_text("\n".join(sorted(borrowed)) + "\n")
    return python


def _install(python: Path, *target: str | Path, env: dict[str, str] | None = None) -> str:
    """``pip install`` into the virtualenv of ``python``, from no index."""
    cmd = [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index"]
    cmd += ["--no-build-isolation", "--disable-pip-version-check", *target]
    return _run(cmd, cwd=python.parent, env=env)


def _installed_from(python: Path, tmp_path: Path) -> list[Path]:
    """Where ``walog`` and ``bookie`` import from in the virtualenv of ``python``."""
    program = "import walog, bookie; print(walog.__file__); print(bookie.__file__)"
    out = _run([python, "-c", program], cwd=tmp_path)
    return [Path(line) for line in out.split()]


def _quickstart(python: Path, tmp_path: Path) -> str:
    """``walog quickstart`` of the virtualenv of ``python``, run outside the repository."""
    walog = python.parent / "walog"
    assert walog.exists(), "the install made no walog command"
    return _run([walog, "quickstart"], cwd=tmp_path)


def test_the_sdist_holds_what_a_build_needs(tmp_path: Path) -> None:
    sdist = _build(tmp_path, "--sdist")["sdist"]
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    needed = {"pyproject.toml", "setup.py", "README.md", "walog/py.typed"}
    needed |= {"walog/wire/proto/bookie.proto", "walog/wire/proto/bookie_pb2.pyi"}
    needed |= {"walog/main.py", "walog/cli/options.py", "bookie/main.py"}
    needed |= {f"{name.replace('.', '/')}.c" for name in EXTENSIONS}
    needed |= {"bookie/storage/_crc32c.h", "bookie/storage/_fastadd.pyi"}
    needed |= {"walog/log/_fastrecords.pyi"}
    assert needed - names == set(), "missing from the sdist"


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_virtualenv_and_runs_the_quickstart(
    tmp_path: Path,
) -> None:
    wheel = _build(tmp_path)["wheel"]  # built from the sdist, as `python -m build` does
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    compiled = [n for n in names if "/_fast" in n and n.endswith(".so")]
    assert len(compiled) == len(EXTENSIONS), names
    python = _fresh_venv(tmp_path / "venv")
    _install(python, wheel)
    site = tmp_path / "venv" / "lib"
    assert all(site in path.parents for path in _installed_from(python, tmp_path))
    out = _quickstart(python, tmp_path)
    assert "Done in" in out, out


@pytest.mark.slow
def test_the_sdist_installs_into_a_fresh_virtualenv_and_runs_the_quickstart(
    tmp_path: Path,
) -> None:
    sdist = _build(tmp_path, "--sdist")["sdist"]
    python = _fresh_venv(tmp_path / "venv")
    _install(python, sdist)
    site = tmp_path / "venv" / "lib"
    assert len(list(site.rglob("_fast*.so"))) == len(EXTENSIONS)
    assert all(site in path.parents for path in _installed_from(python, tmp_path))
    out = _quickstart(python, tmp_path)
    assert "Done in" in out, out


@pytest.mark.slow
def test_without_a_c_compiler_the_sdist_installs_and_bookies_run_pure_python_with_one_warning(
    tmp_path: Path,
) -> None:
    sdist = _build(tmp_path, "--sdist")["sdist"]
    python = _fresh_venv(tmp_path / "venv")
    no_compiler = tmp_path / "bin"  # a PATH with no gcc or cc on it
    no_compiler.mkdir()
    out = _install(python, "-v", sdist, env=_env(CC="/bin/false", PATH=str(no_compiler)))
    # The extensions are optional: each failed build is a warning, the install succeeds.
    for name in EXTENSIONS:
        assert f'building extension "{name}" failed' in out, out
    assert list((tmp_path / "venv").rglob("_fast*.so")) == []
    out = _quickstart(python, tmp_path)
    assert "Done in" in out, out
    # A bookie of the installed package: appends and reads run the pure-Python hot paths,
    # and its log says so once, naming every extension that is missing.
    program = tmp_path / "one_bookie.py"
    program.write_text(
        textwrap.dedent(
            """\
            import sys
            from walog.testing import LocalCluster

            with LocalCluster(bookies=1, data_dir=sys.argv[1]) as cluster:
                with cluster.connect() as client, client.create_ledger(1, 1, 1) as writer:
                    ids = writer.append_many([b"a", b"b", b"c"])
                with cluster.connect() as client, client.open_ledger(writer.ledger_id) as r:
                    assert [e.data for e in r.read(0, ids[-1])] == [b"a", b"b", b"c"]
            """
        )
    )
    _run([python, program, tmp_path / "cluster"], cwd=tmp_path)
    log = (tmp_path / "cluster" / "logs" / "bookie-0.log").read_text()
    warnings = [line for line in log.splitlines() if PURE_PYTHON_WARNING in line]
    assert len(warnings) == 1, log
    assert all(f"bookie.storage.{name}" in warnings[0] for name in BOOKIE_EXTENSIONS), warnings


def test_an_editable_install_is_seen_by_type_checkers(tmp_path: Path) -> None:
    sources = _sources(tmp_path / "sources")
    python = _fresh_venv(tmp_path / "venv")
    # Without a compiler: the extensions do not matter to a type checker, and it is quicker.
    _install(python, "-e", sources, env=_env(CC="/bin/false"))
    user = tmp_path / "user"  # a program of the user's own, outside the checkout
    user.mkdir()
    (user / "program.py").write_text(
        textwrap.dedent(
            """\
            import walog

            client = walog.connect("sqlite:///tmp/walog.db")
            reveal_type(client)
            reveal_type(client.open_log("orders").open_writer().append(b"x"))
            """
        )
    )
    done = subprocess.run(
        [python, "-m", "mypy", "--strict", "--no-incremental", "program.py"],
        cwd=user,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'Revealed type is "walog.client.Client"' in done.stdout, done.stdout
    assert "walog.log.position.Position" in done.stdout and "Any" not in done.stdout, done.stdout
