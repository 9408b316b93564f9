"""Build of the bookie storage engine's compiled hot paths (bookie/storage/): the checkpoint
loop (``_fastcheckpoint.c``), the add path's per-entry checks (``_fastadd.c``), the
journal's writer thread (``_fastjournal.c``) and journal replay at start (``_fastreplay.c``);
everything else about the package is in pyproject.toml. ``pip install -e .`` builds them in
place."""

from setuptools import Extension, setup


def _extension(name: str) -> Extension:
    return Extension(
        f"bookie.storage.{name}",
        sources=[f"bookie/storage/{name}.c"],
        depends=["bookie/storage/_crc32c.h"],  # the CRC32C they share
        extra_compile_args=["-O2", "-Wall", "-Wextra"],
        # Without a C compiler the install still succeeds (the walog client needs no
        # extension) and the bookie runs the pure-Python code.
        optional=True,
    )


setup(
    ext_modules=[
        _extension("_fastcheckpoint"),
        _extension("_fastadd"),
        _extension("_fastjournal"),
        _extension("_fastreplay"),
    ]
)
