"""``python -m klique.client.cli``: the ``klique`` command."""

import sys

from klique.client.cli import main

if __name__ == "__main__":
    sys.exit(main())
