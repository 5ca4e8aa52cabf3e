"""`python -m configmirror` is the same as the `configmirror` command."""

import sys

from configmirror.cli.main import main

sys.exit(main())
