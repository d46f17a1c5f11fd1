"""``python -m zkrecipes.cli``: the ``zkrecipes`` command."""

import sys

from . import main

sys.exit(main())
