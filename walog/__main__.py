"""``python -m walog``: the same command as ``walog`` (:mod:`walog.main`)."""

from walog.main import main

raise SystemExit(main())
