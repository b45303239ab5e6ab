"""``python -m disttrain``: the operator's command line (see :mod:`disttrain.shell.main`)."""

from disttrain.shell.main import main

if __name__ == "__main__":
    main()
