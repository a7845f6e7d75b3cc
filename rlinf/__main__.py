"""``python -m rlinf``: the same as the ``rlinf`` console script."""

import sys

from rlinf.cli import main

if __name__ == "__main__":
    sys.exit(main())
