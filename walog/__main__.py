"""``python -m walog``: the same command as ``walog`` (see walog/cli.py)."""

from walog.cli import main

raise SystemExit(main())
