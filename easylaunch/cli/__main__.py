"""``python -m easylaunch.cli``."""

import sys

from easylaunch.cli import main

sys.exit(main())
