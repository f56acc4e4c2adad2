"""``python -m raylake``: the ``raylake`` command (raylake/cli.py)."""

import sys

from raylake.cli import main

if __name__ == "__main__":
    sys.exit(main())
