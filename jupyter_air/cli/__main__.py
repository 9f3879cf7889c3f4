"""``python -m jupyter_air.cli``: the ``air`` command."""

import sys

from . import main

sys.exit(main())
