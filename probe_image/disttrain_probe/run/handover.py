"""In place, the hand-over: the training command after the probe's ``--`` (:func:`split_argv`,
:func:`parse_command`), the validated rendezvous put into the environment
(:func:`bind_environment`), and the command run in this interpreter or exec'd (:func:`run`).

Three forms (:class:`Command`), chosen from the command alone (pure):

- ``script``: ``python``/``python3``/``python3.X`` (the program's base name) followed by
  ``script.py args...``: ``runpy.run_path(script, run_name="__main__")`` in this
  interpreter, with ``sys.argv = [script, args...]`` and ``sys.path[0]`` the script's
  folder, as python itself would;
- ``module``: ``python -m module args...``: ``runpy.run_module(module, run_name="__main__",
  alter_sys=True)``, ``sys.argv[0]`` the module's file, ``sys.path[0]`` the working folder;
- ``exec``: anything else (torchrun, a shell, python with interpreter options such as
  ``-u``/``-O``/``-X``/``-c``, a program not found): ``os.execvpe``, the process image
  replaced; a program that cannot be run ends with exit 127 and one line on stderr.

In this interpreter torch stays imported (a script's ``import torch`` gets the loaded
module: the point of running in place), the user's ``SystemExit`` code is the exit code, an
uncaught exception prints its traceback (the user's frames) and exits 1, and the process
then ends normally: stdout and stderr flushed, the user's ``atexit`` handlers run.
"""
from __future__ import annotations

import importlib.util
import os
import re
import runpy
import sys
from dataclasses import dataclass
from typing import Any, Callable, List, Mapping, MutableMapping, NoReturn, Optional, Sequence, Tuple

SCRIPT, MODULE, EXEC = "script", "module", "exec"
FORMS = (SCRIPT, MODULE, EXEC)
SEPARATOR = "--"
EXEC_FAILED = 127  # as a shell says a command it cannot run
_PYTHON = re.compile(r"python(3(\.[0-9]+)?)?", re.ASCII)


@dataclass(frozen=True)
class Command:
    """How the training command runs: ``form`` (:data:`FORMS`), ``argv`` (the ``sys.argv``
    the script or module starts with; for ``exec`` the program's whole argv) and ``target``
    (the script's path, the module's name, or the program)."""
    form: str
    argv: Tuple[str, ...]
    target: str


def split_argv(argv: Sequence[str]) -> Tuple[List[str], Optional[List[str]]]:
    """(the probe's own arguments, the command after the first ``--``), the command None
    when there is no ``--`` (the probe alone, as in a probe pod)."""
    argv = list(argv)
    if SEPARATOR not in argv:
        return argv, None
    i = argv.index(SEPARATOR)
    return argv[:i], argv[i + 1:]


def _is_module_name(name: str) -> bool:
    return bool(name) and all(part.isidentifier() for part in name.split("."))


def parse_command(command: Sequence[str]) -> Command:
    """The form a training command runs in (pure; never raises; any list of strings)."""
    cmd = tuple(str(c) for c in command)
    if len(cmd) >= 2 and _PYTHON.fullmatch(os.path.basename(cmd[0])):
        first = cmd[1]
        if first == "-m" and len(cmd) >= 3 and _is_module_name(cmd[2]):
            return Command(MODULE, cmd[2:], cmd[2])
        if first and not first.startswith("-"):
            return Command(SCRIPT, cmd[1:], first)
    return Command(EXEC, cmd, cmd[0] if cmd else "")


def bind_environment(env: MutableMapping[str, str], given: Mapping[str, str],
                     ifname: Optional[str]) -> None:
    """``env`` (os.environ) back to the environment the probe was ``given`` (what the probe
    set for its own collective and NCCL's checks goes), then the validated interface:
    ``NCCL_SOCKET_IFNAME==<ifname>`` (exact, as the operator sets it on training pods) and
    ``GLOO_SOCKET_IFNAME=<ifname>``, each only where the given environment does not set it.
    RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT stay as given."""
    for k in [k for k in env if k not in given]:
        del env[k]
    for k, v in given.items():
        if env.get(k) != v:
            env[k] = v
    if ifname:
        if not env.get("NCCL_SOCKET_IFNAME"):
            env["NCCL_SOCKET_IFNAME"] = "=" + ifname  # "=": exactly this name, not a prefix (eth1, eth10)
        if not env.get("GLOO_SOCKET_IFNAME"):
            env["GLOO_SOCKET_IFNAME"] = ifname


def run(cmd: Command) -> NoReturn:
    """Run ``cmd`` in its form; never returns: raises SystemExit (the exit code) or replaces
    the process."""
    _flush()
    if cmd.form == SCRIPT:
        _run_script(cmd)
    elif cmd.form == MODULE:
        _run_module(cmd)
    else:
        _exec(cmd)
    _flush()
    raise SystemExit(0)


def _run_script(cmd: Command) -> None:
    """``python script.py args``: the script as ``__main__``, its folder first on sys.path."""
    script = cmd.target
    if not os.path.exists(script):  # python's own words and exit code
        _say(f"{sys.executable}: can't open file {os.path.abspath(script)!r}: "
             f"[Errno 2] No such file or directory")
        raise SystemExit(2)
    sys.argv = list(cmd.argv)
    where = script if os.path.isdir(script) else os.path.dirname(os.path.realpath(script))
    _first_on_path(where)
    _as_python(lambda: runpy.run_path(script, run_name="__main__"))


def _run_module(cmd: Command) -> None:
    """``python -m module args``: the module as ``__main__``, the working folder first on
    sys.path; a module not found is said as python says it (exit 1)."""
    name = cmd.target
    sys.argv = list(cmd.argv)  # run_module puts the module's file in sys.argv[0]
    _first_on_path(os.getcwd())
    try:
        spec = importlib.util.find_spec(name)
    except Exception as e:  # a parent package that fails to import, a bad name
        _say(f"{sys.executable}: Error while finding module specification for {name!r} "
             f"({type(e).__name__}: {e})")
        raise SystemExit(1)
    if spec is None:
        _say(f"{sys.executable}: No module named {name}")
        raise SystemExit(1)
    _as_python(lambda: runpy.run_module(name, run_name="__main__", alter_sys=True))


def _first_on_path(folder: str) -> None:
    """sys.path[0] (the probe's launcher folder, or its working folder) becomes ``folder``,
    as python starts a script or a module; nothing under -P / PYTHONSAFEPATH."""
    if getattr(sys.flags, "safe_path", False):
        return
    if sys.path:
        sys.path[0] = folder
    else:
        sys.path.insert(0, folder)


def _as_python(call: Callable[[], Any]) -> None:
    """Run ``call`` as python runs a program: SystemExit (the user's exit code) and
    KeyboardInterrupt pass through; any other uncaught exception prints its traceback
    through sys.excepthook (the user's frames only) and exits 1."""
    try:
        call()
    except Exception as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_globals.get("__name__") in (__name__, "runpy"):
            tb = tb.tb_next  # this module's frames and runpy's are not the user's
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        _flush()
        raise SystemExit(1) from None


def _exec(cmd: Command) -> NoReturn:
    """Replace this process with the command; exit :data:`EXEC_FAILED` with one line on
    stderr when it cannot be run."""
    try:
        os.execvpe(cmd.target, list(cmd.argv), os.environ)
    except (OSError, ValueError) as e:  # not found, not executable, an empty command, a NUL
        why = getattr(e, "strerror", None) or str(e)
        _say(f"disttrain-probe: cannot run the training command {cmd.target!r}: {why}")
        raise SystemExit(EXEC_FAILED)


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except Exception:
        pass


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


__all__ = ["Command", "EXEC", "EXEC_FAILED", "FORMS", "MODULE", "SCRIPT", "SEPARATOR",
           "bind_environment", "parse_command", "run", "split_argv"]
