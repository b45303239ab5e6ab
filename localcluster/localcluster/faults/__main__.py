"""``python -m localcluster.faults``: the generated-faults runner (``runner.main``)."""
import sys

from localcluster.faults.runner import main

sys.exit(main())
