"""``python -m callhook``."""

import sys

from callhook.cli import main

sys.exit(main())
