"""Entry point: python -m localcluster up|down|status|env."""
import sys

from .cli import main

sys.exit(main())
