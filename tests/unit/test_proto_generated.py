"""The committed generated code of walog/wire/proto/bookie.proto matches the .proto file.

Regenerates into a temporary directory with the command the project documents and compares.
Lines that only name the generator's version are left out of the text comparison, so a
newer grpcio-tools does not fail it; the serialized descriptor loaded at run time is
compared byte for byte.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROTO = "walog/wire/proto/bookie.proto"
GENERATED = ["bookie_pb2.py", "bookie_pb2.pyi", "bookie_pb2_grpc.py", "bookie_pb2_grpc.pyi"]

# Generator-version lines: "# Protobuf Python Version: X", the runtime version check's
# numbers, "GRPC_GENERATED_VERSION = 'X'", mypy-protobuf's version comment.
_VERSION_LINE = re.compile(
    r"^(# Protobuf Python Version:.*|\s+\d+,|GRPC_GENERATED_VERSION = .*|.*mypy-protobuf \d.*)$"
)


def _normalise(text: str) -> list[str]:
    return [line for line in text.splitlines() if not _VERSION_LINE.match(line)]


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("proto")
    bin_dir = Path(sys.executable).parent
    if shutil.which("protoc-gen-mypy", path=str(bin_dir)) is None:
        pytest.fail(f"protoc-gen-mypy is not installed in {bin_dir} (install the dev extra)")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I.",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--mypy_out={out}",
            f"--mypy_grpc_out={out}",
            PROTO,
        ],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
    )
    return out / "walog" / "wire" / "proto"


@pytest.mark.parametrize("name", GENERATED)
def test_committed_generated_code_equals_regenerated(regenerated: Path, name: str) -> None:
    committed = (REPO / "walog" / "wire" / "proto" / name).read_text()
    fresh = (regenerated / name).read_text()
    assert _normalise(committed) == _normalise(fresh), (
        f"walog/wire/proto/{name} is stale: regenerate it from the repository root with "
        "grpc_tools.protoc (the command is in docs/operations.md, 'Changing the wire protocol')"
    )


def _serialized_descriptor(module_source: str) -> bytes:
    """The bytes literal passed to ``AddSerializedFile`` in a generated ``_pb2.py``."""
    for node in ast.walk(ast.parse(module_source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
        ):
            value = ast.literal_eval(node.args[0])
            assert isinstance(value, bytes)
            return value
    raise AssertionError("no AddSerializedFile call in the generated module")


def test_committed_descriptor_equals_proto_file(regenerated: Path) -> None:
    from walog.wire.proto import bookie_pb2

    fresh = _serialized_descriptor((regenerated / "bookie_pb2.py").read_text())
    assert bookie_pb2.DESCRIPTOR.serialized_pb == fresh
