"""``python -m bookie``: run a bookie (see bookie/main.py for the flags)."""

from bookie.main import main

raise SystemExit(main(prog="python -m bookie"))
