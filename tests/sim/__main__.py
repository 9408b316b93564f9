"""``python -m tests.sim``: see tests/sim/run.py."""

import sys

from tests.sim.run import main

sys.exit(main())
