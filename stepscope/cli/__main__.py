"""`python -m stepscope.cli` runs the `stepscope` command."""

import sys

from stepscope.cli.main import main

sys.exit(main())
