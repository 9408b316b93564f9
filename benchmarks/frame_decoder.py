"""What splitting a byte stream into frames costs: ``python benchmarks/frame_decoder.py``.

Feeds 64 add-sized frames (65,000-byte bodies, about what a pipelined writer sends a
bookie) to ``walog.wire.frames.FrameDecoder`` in chunks of a few sizes, as a socket's reads
hand them over, and prints the CPU time per KiB of stream. Most frames span reads, so this
is mostly the cost of joining a frame's body from the chunks. Run it in two checkouts to
compare two versions of the decoder.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from walog.wire.frames import FrameDecoder, Kind, encode

BODY_BYTES = 65_000
FRAMES = 64
CHUNK_SIZES = (16_384, 65_536, 262_144)


def us_per_kib(chunk: int, rounds: int) -> float:
    """CPU microseconds per KiB to decode the stream fed in ``chunk``-byte pieces."""
    stream = b"".join(encode(i, Kind.DATA, 1, b"x" * BODY_BYTES) for i in range(FRAMES))
    pieces = [stream[i : i + chunk] for i in range(0, len(stream), chunk)]

    def decode() -> None:
        decoder = FrameDecoder()
        frames = sum(len(decoder.feed(piece)) for piece in pieces)
        assert frames == FRAMES

    seconds = min(timeit.repeat(decode, number=rounds, repeat=5)) / rounds
    return seconds * 1e6 / (len(stream) / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50, help="decodes per measurement")
    args = parser.parse_args()
    for chunk in CHUNK_SIZES:
        print(f"chunks of {chunk:>7,} bytes: {us_per_kib(chunk, args.rounds):.3f} us/KiB")


if __name__ == "__main__":
    main()
