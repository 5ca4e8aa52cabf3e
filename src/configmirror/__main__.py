"""`python -m configmirror` is the same as the `configmirror` command."""

import sys

from configmirror.cli import main

sys.exit(main())
