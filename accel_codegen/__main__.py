"""``python -m accel_codegen``: the command-line tool (see :mod:`accel_codegen.tools.cli`)."""
import sys

from .tools.cli import main

sys.exit(main())
