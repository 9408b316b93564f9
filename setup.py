"""Build of the compiled hot paths: the bookie storage engine's (bookie/storage/) add
path's per-entry checks (``_fastadd.c``), journal writer
thread (``_fastjournal.c``) and journal replay at start (``_fastreplay.c``), and the log
writer's per-record path (walog/log/_fastrecords.c); everything else about the package is in
pyproject.toml. ``pip install -e .`` builds them in place."""

from setuptools import Extension, setup


def _extension(module: str) -> Extension:
    path = module.replace(".", "/")
    return Extension(
        module,
        sources=[f"{path}.c"],
        depends=["bookie/storage/_crc32c.h"],  # the CRC32C the bookie's share
        extra_compile_args=["-O2", "-Wall", "-Wextra"],
        # Without a C compiler the install still succeeds and walog and the bookie run
        # the pure-Python code.
        optional=True,
    )


setup(
    ext_modules=[
        _extension("bookie.storage._fastadd"),
        _extension("bookie.storage._fastjournal"),
        _extension("bookie.storage._fastreplay"),
        _extension("walog.log._fastrecords"),
    ]
)
