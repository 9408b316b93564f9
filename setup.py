"""Build of the compiled checkpoint loop (bookie/_fastcheckpoint.c); everything else about
the package is in pyproject.toml. ``pip install -e .`` builds it in place."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "bookie._fastcheckpoint",
            sources=["bookie/_fastcheckpoint.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra"],
            # Without a C compiler the install still succeeds (the walog client needs no
            # extension) and the bookie runs the pure-Python loop.
            optional=True,
        )
    ]
)
