"""Installed as ``<install dir>/site/sitecustomize.py`` (``disttrain_probe.install``): with
that directory on PYTHONPATH, every Python process of the training container runs it at
startup.

With ``DISTTRAIN_PROGRESS_DIR`` set it starts the progress recorder
(``disttrain_probe.progress.recorder``, imported from the install dir, the parent of this
file's directory, which is on ``sys.path`` only for that import); then it runs the next
``sitecustomize`` on the path (the image's or the distribution's own), which ours hides by
coming first. Nothing here may raise into the user's program: each failure is written once
to stderr.
"""
import os
import sys


def _say(what: str, e: BaseException) -> None:
    try:
        sys.stderr.write(f"disttrain sitecustomize: {what}: {type(e).__name__}: {e}"[:300] + "\n")
    except Exception:  # stderr closed
        pass


def _chain(here: str) -> None:
    """Run the next ``sitecustomize`` on ``sys.path`` after ``here`` (ours), if any."""
    import importlib.machinery  # only when chaining (already loaded by the interpreter's startup)
    import importlib.util  # the same

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("DISTTRAIN_PROGRESS_DIR"):
        package_root = os.path.dirname(here)
        added = package_root not in sys.path
        if added:
            sys.path.insert(0, package_root)
        try:
            from disttrain_probe.progress import recorder  # only when asked: startup stays as it was
            recorder.start()
        except Exception as e:
            _say("progress recorder not started", e)
        finally:
            if added and package_root in sys.path:
                sys.path.remove(package_root)
    try:
        _chain(here)
    except Exception as e:
        _say("the next sitecustomize failed", e)


if __name__ in ("sitecustomize", "__main__"):
    main()
