"""torchrun in the user's own command: recognising it, and the options the operator owns.

Kubeflow users write the launcher themselves (``torchrun --nproc-per-node=8 train.py``).
The operator then leaves the command as written and hands torchrun the validated
rendezvous through the environment torchrun reads for every option it leaves unset
(``PET_<DEST>``, torch.distributed.argparse_util.env; checked against torch 2.8's
``torch/distributed/run.py``): ``PET_NNODES``, ``PET_NODE_RANK``, ``PET_NPROC_PER_NODE``,
``PET_MASTER_ADDR``, ``PET_MASTER_PORT`` and for c10d ``PET_RDZV_BACKEND``,
``PET_RDZV_ENDPOINT``, ``PET_RDZV_ID``, as Kubeflow Trainer does (:func:`operator_env`
lists every variable the operator sets, ``MASTER_ADDR`` and ``NODE_RANK`` included).

An option given on the command line beats its ``PET_*`` variable, so an option that
contradicts the spec would silently replace the rendezvous the probe validated.
:func:`conflicting_options` finds them. An option's value is read as torchrun will
receive it: after the kubelet's ``$(NAME)`` expansion and, inside ``bash -c``, the
shell's ``$NAME``/``${NAME}`` (:mod:`disttrain.api.shellwords`), with the operator's
variables standing for their values (per-pod values symbolically: "the master address",
"this pod's node rank"). It is accepted when that value is the one the operator passes
(``--nnodes=2`` or ``--nnodes=$PET_NNODES`` for numNodes 2, ``--master_addr=$MASTER_ADDR``,
``--rdzv_endpoint=${MASTER_ADDR}:${MASTER_PORT}``); a variable the operator does not set
(``--node_rank=$RANK`` with the torchrun launcher) can be anything, and is refused.

Recognised launch forms: ``torchrun ...``, ``python[3] [-u ...] -m torch.distributed.run
...`` (each possibly after ``env``/``exec``/``VAR=value``), and the same inside the script
of ``sh|bash|dash|zsh -c "..."`` (split as the shell splits it: line continuations,
quotes, ``;``, ``&&``, ``||``, ``|``, ``&`` and newlines). Options are read as torchrun's
argparse reads them, abbreviations included, up to the training script.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from disttrain.api.shellwords import Word, argv_words, split_script, unknown_names

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
# words before the program that run it: env's and exec's, and the shell's reserved words
_PREFIXES = {"env", "exec", "command", "nohup", "time", "{", "!", "then", "do", "else", "elif",
             "if", "while", "until"}

# What the operator's variables stand for, per pod (compared, never shown): the master's
# address, this pod's node rank, the job's uid.
MASTER = "\x01the master address\x01"
NODE_RANK = "\x01this pod's node rank\x01"
RUN_ID = "\x01the job's uid\x01"


@dataclass(frozen=True)
class Passed:
    """What the operator passes for a spec: ``num_nodes`` (spec.numNodes), ``nproc``
    (processes per node), ``backend`` and ``port`` (spec.rendezvous), ``launcher``."""

    num_nodes: int
    nproc: int
    backend: str = "static"
    port: int = 29500
    launcher: str = "torchrun"


def operator_env(p: Passed) -> dict[str, str]:
    """Every variable the operator sets in the trainer container for ``p`` (name -> value, the
    per-pod ones as :data:`MASTER`, :data:`NODE_RANK`, :data:`RUN_ID`), as
    disttrain.children.pods.build_worker_pod sets them (a unit test holds the two equal):
    MASTER_ADDR, MASTER_PORT, PET_MASTER_ADDR, PET_MASTER_PORT, PET_NNODES,
    PET_NPROC_PER_NODE, PET_NODE_RANK, NODE_RANK; with backend c10d PET_RDZV_BACKEND,
    PET_RDZV_ENDPOINT, PET_RDZV_ID; with launcher env WORLD_SIZE, RANK (node rank x
    nproc), LOCAL_RANK, LOCAL_WORLD_SIZE. Not RANK or WORLD_SIZE with launcher torchrun:
    torchrun sets those per process."""
    env = {"MASTER_ADDR": MASTER, "MASTER_PORT": str(p.port), "PET_MASTER_ADDR": MASTER,
           "PET_MASTER_PORT": str(p.port), "PET_NNODES": str(p.num_nodes), "PET_NPROC_PER_NODE": str(p.nproc),
           "PET_NODE_RANK": NODE_RANK, "NODE_RANK": NODE_RANK}
    if p.backend == "c10d":
        env.update(PET_RDZV_BACKEND="c10d", PET_RDZV_ENDPOINT=f"{MASTER}:{p.port}", PET_RDZV_ID=RUN_ID)
    if p.launcher == "env":
        env.update(WORLD_SIZE=str(p.num_nodes * p.nproc), LOCAL_RANK="0", LOCAL_WORLD_SIZE=str(p.nproc),
                   RANK=NODE_RANK if p.nproc == 1 else f"\x01this pod's node rank x {p.nproc}\x01")
    return env


@dataclass(frozen=True)
class Option:
    """One torchrun option as written: ``text`` (e.g. ``--nnodes=4`` or ``--nnodes 4``),
    its argparse ``dest`` (None if torchrun has no such option), its value as torchrun
    receives it (None for a flag; see :mod:`disttrain.api.shellwords` for the expansions)
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


def parse_options(args: Sequence[str], index: Optional[Sequence[int]] = None,
                  shown: Optional[Sequence[str]] = None) -> list[Option]:
    """torchrun's options in ``args`` (what follows ``torchrun``, as torchrun receives
    it), up to the training script. ``index[i]`` is the argv item ``args[i]`` came from
    (default: i), ``shown[i]`` its text as written (default: ``args[i]``)."""
    idx = list(index) if index is not None else list(range(len(args)))
    texts = list(shown) if shown is not None else list(args)
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
        text, at = texts[i], idx[i]
        if takes and not attached:
            value = args[i + 1] if i + 1 < len(args) else None
            text = f"{text} {texts[i + 1]}" if value is not None else text
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


def _options_of(words: Sequence[Word], index: Sequence[int]) -> Optional[list[Option]]:
    start = torchrun_args([w.value for w in words])
    if start is None:
        return None
    rest = words[start:]
    return parse_options([w.value for w in rest], index[start:], [w.shown for w in rest])


def launches(argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> list[list[Option]]:
    """The torchrun invocations in a container's argv (command + args), each as its list
    of options, their values expanded with the container's variables ``env`` (name ->
    value; default none known); [] when the command does not run torchrun itself (the
    operator then wraps it in torchrun). A script the shell would refuse (an unclosed
    quote) counts as not running torchrun. Never raises."""
    argv = [a for a in argv if isinstance(a, str)]
    env = env or {}
    words = argv_words(argv, env)
    direct = _options_of(words, range(len(words)))
    if direct is not None:
        return [direct]
    script_at = _shell_script([w.value for w in words])
    if script_at is None:
        return []
    commands = split_script(argv[script_at], env)
    found = []
    for cmd in commands or []:
        opts = _options_of(cmd, [script_at] * len(cmd))
        if opts is not None:
            found.append(opts)
    return found


# a launcher named anywhere in the command: torchrun, or its modules
_LAUNCHER_NAMED = re.compile(r"(?<![\w.-])(torchrun|torch\.distributed\.(run|launch))(?![\w-])")


def runs_torchrun(argv: Sequence[str]) -> bool:
    """Whether the container's own command starts torchrun, so the operator must not wrap it
    in another: :func:`launches` found an invocation, or (a script it cannot read as a
    shell would: quotes inside ``$(...)``, here-documents, ``bash -o pipefail -c``,
    ``timeout 3600 torchrun ...``, a shell in a shell) the command names a launcher
    anywhere. Wrapping such a command starts two torchruns on one rendezvous; passing it as
    written lets it read the rendezvous from ``PET_*``. Never raises."""
    argv = [a for a in argv if isinstance(a, str)]
    if launches(argv):
        return True
    return any(_LAUNCHER_NAMED.search(a) for a in argv)


def expected_values(dest: str, p: Passed) -> set[str]:
    """The values of torchrun option ``dest`` that say what the operator passes (per-pod
    ones symbolically, as in :func:`operator_env`): ``nnodes`` N or N:N, ``nproc_per_node``,
    ``rdzv_backend``, ``master_port``, ``master_addr`` the master, ``node_rank`` this pod's,
    ``rdzv_endpoint`` master:port (both backends: static reads it as the master's address),
    ``rdzv_id`` the job's uid (c10d)."""
    return {
        "nnodes": {str(p.num_nodes), f"{p.num_nodes}:{p.num_nodes}"},
        "nproc_per_node": {str(p.nproc)},
        "rdzv_backend": {p.backend},
        "master_port": {str(p.port)},
        "master_addr": {MASTER},
        "node_rank": {NODE_RANK},
        "rdzv_endpoint": {f"{MASTER}:{p.port}"} | ({""} if p.backend == "static" else set()),
        "rdzv_id": {RUN_ID},
    }.get(dest, set())


def _same_on_every_pod(value: str) -> bool:
    return not unknown_names(value) and "\x01this pod's" not in value


def conflicting_options(argv: Sequence[str], p: Passed,
                        user_env: Optional[Mapping[str, str]] = None) -> list[tuple[Option, str]]:
    """The torchrun options in ``argv`` that do not say what the operator passes, each
    with the reason (naming the spec field, or the variable the operator does not set):
    a value other than :func:`expected_values` after the expansions (``user_env``: the
    container's own variables of known value, which the operator's override),
    ``--standalone`` with more than one node. ``--rdzv-id`` with the static backend only
    names the store's keys: any value the same on every pod is accepted."""
    env = {**(user_env or {}), **operator_env(p)}
    fields = {"nnodes": f"spec.numNodes is {p.num_nodes}", "nproc_per_node": f"spec.numProcPerNode makes it {p.nproc}",
              "rdzv_backend": f"spec.rendezvous.backend is {p.backend}", "master_port": f"spec.rendezvous.port is {p.port}"}
    problems: list[tuple[Option, str]] = []
    for launch in launches(argv, env):
        for opt in launch:
            if opt.dest not in OWNED:
                continue
            if opt.dest == "standalone":
                if p.num_nodes > 1:
                    problems.append((opt, f"starts a single-node rendezvous and spec.numNodes is {p.num_nodes}"))
                continue
            value = opt.value
            if value is not None and value in expected_values(opt.dest, p):
                continue
            if value is not None and opt.dest == "rdzv_id" and p.backend == "static" and _same_on_every_pod(value):
                continue
            problems.append((opt, _why(opt.dest, value or "", fields, p.launcher)))
    return problems


def _why(dest: str, value: str, fields: Mapping[str, str], launcher: str) -> str:
    """Why an option's value is refused, as a predicate of the option."""
    names = unknown_names(value)
    if not names:
        why = fields.get(dest, "the operator sets it per pod from the validated rendezvous")
        return f"contradicts the validated rendezvous ({why})"
    name = names[0]
    if not name.isidentifier():
        return f"reads {name[:40]}, which the operator cannot check against the validated rendezvous"
    if name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE") and launcher == "torchrun":
        return f"reads {name}, which the operator does not set (with launcher torchrun, torchrun sets it per process)"
    return f"reads {name}, which the operator does not set"


def own_reference(dest: str, env: Mapping[str, str]) -> Optional[str]:
    """What to write for option ``dest`` to say the operator's value, given the
    operator's variables ``env`` (:func:`operator_env`): ``$(PET_<DEST>)`` when the
    operator sets it, ``$(MASTER_ADDR):$(MASTER_PORT)`` for a static --rdzv-endpoint;
    None when there is none (``--standalone``, a static --rdzv-backend or --rdzv-id)."""
    var = f"PET_{dest.upper()}"
    if var in env:
        return f"$({var})"
    return "$(MASTER_ADDR):$(MASTER_PORT)" if dest == "rdzv_endpoint" else None
