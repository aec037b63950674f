"""``python -m pdtp`` runs the same CLI as the ``pdtp`` command."""

import sys

from .cli import main

sys.exit(main())
