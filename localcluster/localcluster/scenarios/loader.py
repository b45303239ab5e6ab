"""Loading scenarios: a name or path to its file, YAML to a checked ``Scenario``
with each error located at its line, every scenario's name, and the job documents a
scenario applies (the example job deep-merged with its ``job``)."""
from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Optional, Sequence

import yaml
from pydantic import ValidationError

from localcluster.common.config import (
    REPO_ROOT,
)
from localcluster.scenarios.nodeplan import topology
from localcluster.scenarios.scenario import Scenario, ScenarioError

SCENARIO_DIR = REPO_ROOT / "scenarios"
REGRESSION = "regression"  # scenarios/regression/: cases `python -m localcluster.faults run` kept


# -- loading ------------------------------------------------------------------------------
def _lines(node: yaml.Node, path: tuple = (), out: Optional[dict] = None) -> dict:
    """Map every path (tuple of keys/indexes) in the composed YAML to its 1-based line.
    Raises ScenarioError (a line, no source) for a key given twice in one mapping: YAML
    loaders keep the last one silently, which would drop half of what was written."""
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        for k, v in node.value:
            if k.value in seen:
                where = ".".join(str(x) for x in path + (k.value,))
                raise ScenarioError(f"{k.start_mark.line + 1}: {where}: given twice (also on line "
                                    f"{seen[k.value]}); YAML would keep only the last one")
            seen[k.value] = k.start_mark.line + 1
            out[path + (k.value,)] = k.start_mark.line + 1  # a field's line is its key's
            _lines(v, path + (k.value,), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _lines(v, path + (i,), out)
    return out


def _line_for(lines: dict, loc: tuple) -> int:
    loc = tuple(loc)
    while loc and loc not in lines:
        loc = loc[:-1]
    return lines.get(loc, 1)


def resolve(name_or_path: str) -> Path:
    """A scenario name (``scenarios/<name>.yaml``) or a path to a file anywhere.
    Raises ScenarioError if neither exists."""
    p = Path(name_or_path)
    if name_or_path.startswith(f"{REGRESSION}/") and (SCENARIO_DIR / f"{name_or_path}.yaml").is_file():
        return SCENARIO_DIR / f"{name_or_path}.yaml"
    if p.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if p.is_file():
            return p.resolve()
        raise ScenarioError(f"{name_or_path}: no such file")
    cand = SCENARIO_DIR / f"{name_or_path}.yaml"
    if cand.is_file():
        return cand
    known = ", ".join(sorted(x.stem for x in SCENARIO_DIR.glob("*.yaml")))
    raise ScenarioError(f"no scenario {name_or_path!r} in {SCENARIO_DIR} (known: {known})")


def parse(text: str, source: str = "<scenario>") -> Scenario:
    """Parse and validate scenario YAML. Raises ScenarioError ``source:line: field: why``."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise ScenarioError(f"{source}:{line}: not valid YAML: {getattr(e, 'problem', e)}") from None
    if root is None or not isinstance(root, yaml.MappingNode):
        raise ScenarioError(f"{source}:1: a scenario is a mapping (description, nodes, expect, ...)")
    try:
        lines = _lines(root)
        data = yaml.safe_load(text)
    except ScenarioError as e:
        raise ScenarioError(f"{source}:{e}") from None
    except (yaml.YAMLError, RecursionError) as e:  # e.g. a tag safe_load refuses
        mark = getattr(e, "problem_mark", None)
        raise ScenarioError(f"{source}:{mark.line + 1 if mark else 1}: not valid scenario YAML: "
                            f"{getattr(e, 'problem', None) or type(e).__name__}") from None
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as e:
        raise _located(e, source, lines) from None
    sc.name = Path(source).stem
    try:
        topology(sc)
    except ScenarioError as e:
        raise ScenarioError(f"{source}:{_line_for(lines, ('nodeOverrides',))}: {e}") from None
    _check_job(sc, source, lines)
    return sc


def _located(e: ValidationError, source: str, lines: dict, prefix: tuple = ()) -> ScenarioError:
    """One ``source:line: field: why`` per error of ``e``; ``prefix`` is where the
    validated object sits in the file (e.g. ``("job",)``)."""
    msgs = []
    for err in e.errors():
        loc = prefix + tuple(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        here = ".".join(str(x) for x in loc)
        named, sep, rest = msg.partition(": ")
        if err["msg"].startswith("Value error, ") and sep and (not loc or named.startswith(here + ".")):
            # cross-field errors name their own field path: "nodeOverrides.node-z: ..."
            loc = tuple(int(x) if x.isdigit() else x for x in named.split("."))
            field_s, msg = named, rest
        else:
            field_s = here or "(top level)"
        msgs.append(f"{source}:{_line_for(lines, loc)}: {field_s}: {msg}")
    return ScenarioError("\n".join(msgs))


def _check_job(sc: Scenario, source: str, lines: dict) -> None:
    """The example's spec with ``job`` merged in must be a valid DistTrainingJob spec (the
    operator's own models), so a bad override is named here, before a cluster is built,
    not by ``kubectl apply`` after. Raises ScenarioError ``source:line: job.<field>: why``."""
    from disttrain.api.types import DistTrainingJobSpec

    spec = next((d["spec"] for d in job_documents(sc) if d.get("kind") == "DistTrainingJob"), {})
    try:
        DistTrainingJobSpec.model_validate(spec)
    except ValidationError as e:
        raise _located(e, source, lines, ("job",)) from None


def load(name_or_path: str) -> Scenario:
    """Load a scenario by name or path. Raises ScenarioError."""
    p = resolve(name_or_path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{p}:1: cannot read the file as UTF-8 text: {e}") from None
    return parse(text, str(p))


def all_names() -> list[str]:
    """Names of the scenarios in ``scenarios/``."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def regression_names() -> list[str]:
    """Names (``regression/<stem>``, each one :func:`load` takes) of the generated cases
    kept under ``scenarios/regression/`` (none while the folder does not exist)."""
    return sorted(f"{REGRESSION}/{p.stem}" for p in (SCENARIO_DIR / REGRESSION).glob("*.yaml"))


def regression_sample(k: int, seed: int) -> list[str]:
    """``k`` of :func:`regression_names` drawn with ``seed`` (all of them when there are no
    more than ``k``), sorted: what `make test` runs; `make test-regression` runs them all."""
    names = regression_names()
    if len(names) <= k:
        return names
    return sorted(random.Random(seed).sample(names, k))


def scenario_sample(k: int, seed: int, always: Sequence[str] = (),
                    names: Optional[Sequence[str]] = None) -> list[str]:
    """The scenarios `make test` runs: ``always`` (those of them among ``names``, default
    :func:`all_names`) and ``k`` of the others drawn with ``seed`` (all when there are no
    more than ``k``), sorted; `make test-scenarios` runs every one of :func:`all_names`."""
    names = list(all_names() if names is None else names)
    kept = [n for n in names if n in always]
    rest = [n for n in names if n not in always]
    drawn = rest if len(rest) <= k else random.Random(seed).sample(rest, k)
    return sorted(kept + drawn)


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` merged into a copy of ``base`` (mappings recursively; anything else replaces)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def placed(sc: Scenario, placement: Optional[str]) -> Scenario:
    """``sc`` with its job's ``probe.placement`` set (``Pods``, ``InPlace``; None: as written),
    so one scenario runs in both placements and must reach the same verdict."""
    if not placement:
        return sc
    return sc.model_copy(update={"job": deep_merge(sc.job or {}, {"probe": {"placement": placement}})})


def job_documents(sc: Scenario, example: Optional[Path] = None) -> list[dict]:
    """The example's documents with the scenario's ``job`` merged into the job's spec, and
    its ``training`` (strike.py): the script in place of ``train_digits.py``, the env added
    to the trainer container."""
    example = example or REPO_ROOT / "examples" / "ddp-digits.yaml"
    docs = [d for d in yaml.safe_load_all(example.read_text()) if d]
    script = sc.training.script_text() if sc.training is not None else None
    for d in docs:
        if d.get("kind") == "ConfigMap" and script is not None:
            d["data"] = {**(d.get("data") or {}), "train_digits.py": script}
        if d.get("kind") == "DistTrainingJob":
            d["spec"] = deep_merge(d.get("spec") or {}, sc.job)
            if sc.training is not None and sc.training.env:
                from disttrain.api.trainer import trainer_index  # the operator's rule: the same trainer

                containers = d["spec"]["template"]["spec"]["containers"]
                trainer = containers[trainer_index(containers, d["spec"].get("trainerContainer")) or 0]
                trainer["env"] = list(trainer.get("env") or []) + [
                    {"name": k, "value": v} for k, v in sc.training.env.items()]
            if sc.kueue is not None:  # queued in the LocalQueue scenariorun creates
                from localcluster.cluster.kueue_objects import LOCAL_QUEUE, QUEUE_LABEL
                d.setdefault("metadata", {}).setdefault("labels", {})[QUEUE_LABEL] = LOCAL_QUEUE
    return docs
