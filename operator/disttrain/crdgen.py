"""``python -m disttrain.crdgen``: print the CRD (see :mod:`disttrain.api.crdgen`)."""

import sys

from disttrain.api.crdgen import render

if __name__ == "__main__":
    sys.stdout.write(render())
