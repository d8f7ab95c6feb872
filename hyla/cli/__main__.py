"""`python -m hyla.cli`: the `hyla` command (the sweeps start their runs this way)."""

import sys

from hyla.cli import main

sys.exit(main())
