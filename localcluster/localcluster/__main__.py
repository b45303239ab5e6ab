"""Entry point: python -m localcluster up|down|status|env."""
import sys

from localcluster.cli import main

sys.exit(main())
