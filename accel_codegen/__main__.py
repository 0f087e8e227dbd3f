"""``python -m accel_codegen``: the command-line tool (see :mod:`accel_codegen.cli`)."""
import sys

from .cli import main

sys.exit(main())
