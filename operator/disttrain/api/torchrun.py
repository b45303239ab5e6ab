"""torchrun in the user's own command: recognising it, and the options the operator owns.

Kubeflow users write the launcher themselves (``torchrun --nproc-per-node=8 train.py``).
The operator then leaves the command as written and hands torchrun the validated
rendezvous through the environment torchrun reads for every option it leaves unset
(``PET_<DEST>``, torch.distributed.argparse_util.env; checked against torch 2.8's
``torch/distributed/run.py``): ``PET_NNODES``, ``PET_NODE_RANK``, ``PET_NPROC_PER_NODE``,
``PET_MASTER_ADDR``, ``PET_MASTER_PORT`` and for c10d ``PET_RDZV_BACKEND``,
``PET_RDZV_ENDPOINT``, ``PET_RDZV_ID``, as Kubeflow Trainer does.

An option given on the command line beats its ``PET_*`` variable, so an option that
contradicts the spec would silently replace the rendezvous the probe validated.
:func:`conflicting_options` finds them; an option is accepted when it says what the
operator would say (``--nnodes=2`` for numNodes 2, ``--master-port=29500`` for that
rendezvous.port) or refers to the operator's variable (``--node-rank=$(PET_NODE_RANK)``,
expanded by the kubelet; ``$PET_NODE_RANK`` inside ``bash -c``).

Recognised launch forms: ``torchrun ...``, ``python[3] [-u ...] -m torch.distributed.run
...`` (each possibly after ``env``/``exec``/``VAR=value``), and the same inside the script
of ``sh|bash|dash|zsh -c "..."`` (split with shlex, at ``;``, ``&&``, ``||``, ``|``,
``&`` and newlines). Options are read as torchrun's argparse reads them, abbreviations
included, up to the training script.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Optional, Sequence

# torchrun's options in torch 2.8 (torch/distributed/run.py get_args_parser): long option
# spellings -> (dest, takes a value).
_LONG: dict[str, tuple[str, bool]] = {}
for _dest, _takes, _names in [
    ("help", False, ["--help"]),
    ("nnodes", True, ["--nnodes"]),
    ("nproc_per_node", True, ["--nproc-per-node", "--nproc_per_node"]),
    ("rdzv_backend", True, ["--rdzv-backend", "--rdzv_backend"]),
    ("rdzv_endpoint", True, ["--rdzv-endpoint", "--rdzv_endpoint"]),
    ("rdzv_id", True, ["--rdzv-id", "--rdzv_id"]),
    ("rdzv_conf", True, ["--rdzv-conf", "--rdzv_conf"]),
    ("standalone", False, ["--standalone"]),
    ("max_restarts", True, ["--max-restarts", "--max_restarts"]),
    ("monitor_interval", True, ["--monitor-interval", "--monitor_interval"]),
    ("start_method", True, ["--start-method", "--start_method"]),
    ("event_log_handler", True, ["--event-log-handler", "--event_log_handler"]),
    ("role", True, ["--role"]),
    ("module", False, ["--module"]),
    ("no_python", False, ["--no-python", "--no_python"]),
    ("run_path", False, ["--run-path", "--run_path"]),
    ("log_dir", True, ["--log-dir", "--log_dir"]),
    ("redirects", True, ["--redirects"]),
    ("tee", True, ["--tee"]),
    ("local_ranks_filter", True, ["--local-ranks-filter", "--local_ranks_filter"]),
    ("node_rank", True, ["--node-rank", "--node_rank"]),
    ("master_addr", True, ["--master-addr", "--master_addr"]),
    ("master_port", True, ["--master-port", "--master_port"]),
    ("local_addr", True, ["--local-addr", "--local_addr"]),
    ("logs_specs", True, ["--logs-specs", "--logs_specs"]),
]:
    for _n in _names:
        _LONG[_n] = (_dest, _takes)
_SHORT = {"-h": ("help", False), "-m": ("module", False), "-r": ("redirects", True), "-t": ("tee", True)}

# The options that carry the rendezvous: the operator's (see conflicting_options).
OWNED = ("nnodes", "nproc_per_node", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "standalone",
         "node_rank", "master_addr", "master_port")
_SHELLS = {"sh", "bash", "dash", "zsh", "ash", "ksh"}
_PREFIXES = {"env", "exec", "command", "nohup"}
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", ";;", "|&"}


@dataclass(frozen=True)
class Option:
    """One torchrun option as written: ``text`` (e.g. ``--nnodes=4`` or ``--nnodes 4``),
    its argparse ``dest`` (None if torchrun has no such option), its value (None for a flag)
    and ``index``, the argv item it was found in."""

    text: str
    dest: Optional[str]
    value: Optional[str]
    index: int


def _resolve_long(name: str) -> tuple[Optional[str], bool]:
    if name in _LONG:
        return _LONG[name]
    found = {_LONG[opt] for opt in _LONG if opt.startswith(name)}  # argparse's abbreviations
    return found.pop() if len(found) == 1 else (None, False)


def parse_options(args: Sequence[str], index: Optional[Sequence[int]] = None) -> list[Option]:
    """torchrun's options in ``args`` (what follows ``torchrun``), up to the training
    script. ``index[i]`` is the argv item ``args[i]`` came from (default: i)."""
    idx = list(index) if index is not None else list(range(len(args)))
    out: list[Option] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--" or not a.startswith("-") or a == "-":
            break  # the training script (argparse's first positional) and its arguments
        value: Optional[str]
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            dest, takes = _resolve_long(name)
            attached = bool(eq)
        else:
            dest, takes = _SHORT.get(a[:2], (None, False))
            value, attached = a[2:], len(a) > 2
        text, at = a, idx[i]
        if takes and not attached:
            value = args[i + 1] if i + 1 < len(args) else None
            text = f"{a} {value}" if value is not None else a
            i += 1
        out.append(Option(text, dest, value if takes else None, at))
        i += 1
    return out


def _strip_prefixes(tokens: list[str]) -> list[str]:
    i = 0
    while i < len(tokens) and (tokens[i] in _PREFIXES or _is_assignment(tokens[i])
                               or (i > 0 and tokens[0] == "env" and tokens[i].startswith("-"))):
        i += 1
    return tokens[i:]


def _is_assignment(token: str) -> bool:
    name, eq, _ = token.partition("=")
    return bool(eq) and name.isidentifier()


def torchrun_args(tokens: Sequence[str]) -> Optional[int]:
    """If ``tokens`` (one simple command) runs torchrun, the position in ``tokens`` where
    torchrun's own arguments start; else None."""
    toks = list(tokens)
    rest = _strip_prefixes(toks)
    start = len(toks) - len(rest)
    if not rest:
        return None
    prog = os.path.basename(rest[0])
    if prog == "torchrun":
        return start + 1
    if prog.startswith("python"):
        i = 1
        while i < len(rest) and rest[i].startswith("-"):
            if rest[i] == "-m":
                if i + 1 < len(rest) and rest[i + 1] == "torch.distributed.run":
                    return start + i + 2
                return None
            if rest[i].startswith("-m"):  # -mtorch.distributed.run
                return start + i + 1 if rest[i][2:] == "torch.distributed.run" else None
            if rest[i] == "-c":
                return None
            i += 2 if rest[i] in ("-X", "-W") else 1
    return None


def _shell_script(argv: Sequence[str]) -> Optional[int]:
    """For ``sh -c SCRIPT ...`` (any shell, ``-c`` possibly among other short options such
    as ``-ec``), the index of SCRIPT in argv; else None."""
    if not argv or os.path.basename(argv[0]) not in _SHELLS:
        return None
    for i in range(1, len(argv)):
        a = argv[i]
        if not a.startswith(("-", "+")) or a.startswith("--"):
            return None
        if a.startswith("-") and "c" in a[1:]:
            return i + 1 if i + 1 < len(argv) else None
    return None


def _simple_commands(script: str) -> list[list[str]]:
    lexer = shlex.shlex(script.replace("\n", " ; "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for tok in lexer:  # raises ValueError on an unbalanced quote
        if tok in _SEPARATORS or set(tok) <= set(";&|()"):
            commands.append([])
        else:
            commands[-1].append(tok)
    return [cmd for cmd in commands if cmd]


def launches(argv: Sequence[str]) -> list[list[Option]]:
    """The torchrun invocations in a container's argv (command + args), each as its list
    of options; [] when the command does not run torchrun itself (the operator then wraps
    it in torchrun). A script that shlex cannot split counts as not running torchrun."""
    argv = [a for a in argv if isinstance(a, str)]
    start = torchrun_args(argv)
    if start is not None:
        return [parse_options(argv[start:], range(start, len(argv)))]
    script_at = _shell_script(argv)
    if script_at is None:
        return []
    try:
        commands = _simple_commands(argv[script_at])
    except ValueError:
        return []
    found = []
    for cmd in commands:
        start = torchrun_args(cmd)
        if start is not None:
            found.append(parse_options(cmd[start:], [script_at] * (len(cmd) - start)))
    return found


def _refers_to_own_variable(value: str, dest: str) -> bool:
    var = f"PET_{dest.upper()}"
    return value in (f"${var}", f"${{{var}}}", f"$({var})")


def conflicting_options(
    argv: Sequence[str], *, num_nodes: int, nproc: int, backend: str, port: int
) -> list[tuple[Option, str]]:
    """The torchrun options in ``argv`` that contradict what the operator passes (each with
    the reason, naming the spec field): ``--nnodes`` other than ``num_nodes``,
    ``--nproc-per-node`` other than ``nproc``, ``--rdzv-backend`` other than ``backend``,
    ``--master-port`` other than ``port``, ``--standalone`` with more than one node, and
    any ``--node-rank``, ``--master-addr``, ``--rdzv-endpoint``, ``--rdzv-id`` (known only
    per pod, after the probe) unless the value is the operator's own variable."""
    expected = {
        "nnodes": ({str(num_nodes), f"{num_nodes}:{num_nodes}"}, f"spec.numNodes is {num_nodes}"),
        "nproc_per_node": ({str(nproc)}, f"spec.numProcPerNode makes it {nproc}"),
        "rdzv_backend": ({backend}, f"spec.rendezvous.backend is {backend}"),
        "master_port": ({str(port)}, f"spec.rendezvous.port is {port}"),
    }
    per_pod = "the operator sets it per pod from the validated rendezvous"
    problems: list[tuple[Option, str]] = []
    for launch in launches(argv):
        for opt in launch:
            if opt.dest not in OWNED:
                continue
            if opt.dest == "standalone":
                if num_nodes > 1:
                    problems.append((opt, f"it starts a single-node rendezvous and spec.numNodes is {num_nodes}"))
                continue
            if opt.value is not None and _refers_to_own_variable(opt.value, opt.dest):
                continue
            ok_values, why = expected.get(opt.dest, (set(), per_pod))
            if opt.value not in ok_values:
                problems.append((opt, why))
    return problems
