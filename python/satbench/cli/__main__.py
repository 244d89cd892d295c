"""``python -m satbench.cli``: the command, as the module ran it when it was one file."""

import sys

from . import main

sys.exit(main())
