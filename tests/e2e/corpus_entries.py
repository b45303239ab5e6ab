"""The corpus of real specs (tests/e2e/corpus/*.yaml): reading an entry and choosing which run.

Each file holds one DistTrainingJob converted from a pod template as people publish it
(Kubeflow, Kubeflow Trainer, JobSet, torchelastic, Volcano, the Kubernetes docs), plus the
ConfigMaps and Secrets it needs, after a header of comments:

    # corpus-source: https://github.com/<owner>/<repo>/blob/<40-hex commit>/<path>
    # corpus-expect: trains
    # corpus-expect: refused at apply: <substring of kubectl's error>
    # corpus-expect: fails with <Condition>=<True|False|Unknown> <Reason>: <substring of the message>

``trains``: Validated=True, then Succeeded=True. ``refused at apply``: ``kubectl apply``
fails, its error naming the field (the substring). ``fails with``: the job's condition
reaches that status and reason, its message containing the substring (the field, the
resource or the fix). Substrings match regardless of case (:func:`holds`). The expected end is the promise (a job trains, or says why not),
not necessarily what the operator does today.

Pure (no cluster): the unit test (tests/unit/repo/test_corpus_files.py) and the e2e runner
(tests/e2e/test_corpus.py) share it.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
TRAINS, REFUSED, FAILS = "trains", "refused at apply", "fails with"
KINDS = (TRAINS, REFUSED, FAILS)
SOURCE_RE = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/\S+$")
_FAILS_RE = re.compile(r"^fails with (\w+)=(True|False|Unknown) (\w+): (.+)$")
_REFUSED_RE = re.compile(r"^refused at apply: (.+)$")
DEFAULT_SAMPLE = 5
# The seed of `make test`'s sample: with the 36 entries, jobset-resnet, k8s-exec-liveness,
# k8s-tcp-liveness-readiness, kubeflow-elastic-echo and kubeflow-mnist-nccl-gpu (every kind,
# quick, and believed to pass on main when chosen); `make test-corpus` runs every entry.
DEFAULT_SEED = 12


@dataclass(frozen=True)
class Expected:
    """An entry's expected end: ``kind`` one of KINDS; for FAILS the condition ``type``,
    its ``status`` and ``reason``; ``substring`` the text the error or message must hold
    (empty for TRAINS)."""

    kind: str
    substring: str = ""
    type: Optional[str] = None
    status: Optional[str] = None
    reason: Optional[str] = None


@dataclass(frozen=True)
class Entry:
    """One corpus file: its path, the header's source URL and expected end, the parsed
    documents (every one a dict), and the DistTrainingJob among them."""

    path: Path
    source: str
    expected: Expected
    docs: tuple[dict[str, Any], ...]

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def job(self) -> dict[str, Any]:
        return next(d for d in self.docs if d.get("kind") == "DistTrainingJob")

    @property
    def job_name(self) -> str:
        return str(self.job["metadata"]["name"])


def parse_expected(text: str) -> Expected:
    """``text`` (what follows ``corpus-expect:``) as an :class:`Expected`. Raises
    ValueError when it is none of the three forms."""
    text = text.strip()
    if text == TRAINS:
        return Expected(TRAINS)
    m = _REFUSED_RE.match(text)
    if m:
        return Expected(REFUSED, m.group(1).strip())
    m = _FAILS_RE.match(text)
    if m:
        return Expected(FAILS, m.group(4).strip(), m.group(1), m.group(2), m.group(3))
    raise ValueError(f"corpus-expect {text!r}: write trains, 'refused at apply: <text>' or "
                     "'fails with <Condition>=<status> <Reason>: <text>'")


def _header_value(text: str, key: str) -> str:
    values = re.findall(rf"^# {key}: (.+)$", text, re.M)
    if len(values) != 1:
        raise ValueError(f"expected one '# {key}:' line, found {len(values)}")
    return values[0].strip()


def load(path: Path) -> Entry:
    """Read one corpus file. Raises ValueError (or yaml.YAMLError) when its header lacks
    one source or one expected end, or it does not hold exactly one DistTrainingJob."""
    text = path.read_text()
    docs = tuple(d for d in yaml.safe_load_all(text) if d is not None)
    if not all(isinstance(d, dict) for d in docs):
        raise ValueError(f"{path.name}: every document must be a mapping")
    jobs = [d for d in docs if d.get("kind") == "DistTrainingJob"]
    if len(jobs) != 1:
        raise ValueError(f"{path.name}: expected one DistTrainingJob, found {len(jobs)}")
    return Entry(path, _header_value(text, "corpus-source"),
                 parse_expected(_header_value(text, "corpus-expect")), docs)


def all_entries(directory: Path = CORPUS_DIR) -> list[Entry]:
    """Every corpus file, by name."""
    return [load(p) for p in sorted(directory.glob("*.yaml"))]


def select(entries: list[Entry], choice: Optional[str], seed: int = DEFAULT_SEED) -> list[Entry]:
    """The entries to run for ``choice`` ($DISTTRAIN_CORPUS): ``all``; a number N, a sample
    of N drawn with ``seed`` that holds one entry of each expected-end kind first (when N
    allows); or a comma list of entry names (file stems). None or empty: a sample of
    DEFAULT_SAMPLE. Raises ValueError for a name not in the corpus. Returned by name."""
    choice = (choice or str(DEFAULT_SAMPLE)).strip()
    if choice == "all":
        return list(entries)
    if choice.isdigit():
        rng = random.Random(seed)
        pool = sorted(entries, key=lambda e: e.name)
        picked: list[Entry] = []
        for kind in KINDS:
            of_kind = [e for e in pool if e.expected.kind == kind]
            if of_kind and len(picked) < int(choice):
                picked.append(rng.choice(of_kind))
        rest = [e for e in pool if e not in picked]
        picked += rng.sample(rest, min(len(rest), max(0, int(choice) - len(picked))))
        return sorted(picked, key=lambda e: e.name)
    by_name = {e.name: e for e in entries}
    names = [n.strip().removesuffix(".yaml") for n in choice.split(",") if n.strip()]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"DISTTRAIN_CORPUS names {unknown} not in {sorted(by_name)}")
    return [by_name[n] for n in names]


def holds(text: str, substring: str) -> bool:
    """Whether ``text`` contains ``substring``, regardless of case ("liveness" is found in
    "Liveness probe failed")."""
    return substring.casefold() in text.casefold()


def conditions(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A DistTrainingJob's status conditions by type (absent or malformed: none)."""
    status = job.get("status") if isinstance(job, dict) else None
    items = status.get("conditions") if isinstance(status, dict) else None
    return {c["type"]: c for c in items or [] if isinstance(c, dict) and isinstance(c.get("type"), str)}


def verdict(expected: Expected, job: dict[str, Any]) -> Optional[str]:
    """Whether ``job`` (as read back) reached ``expected``: None while it has not ended
    either way; "ok" when it did; else one line saying how it ended instead (a job that
    ended otherwise, or reached the condition with another message). For TRAINS the end
    is Succeeded=True after Validated=True; Failed=True is another end."""
    conds = conditions(job)
    failed = conds.get("Failed", {})
    if expected.kind == TRAINS:
        if conds.get("Succeeded", {}).get("status") == "True":
            return "ok" if conds.get("Validated", {}).get("status") == "True" else \
                f"Succeeded without Validated=True: {conds.get('Validated')}"
        if failed.get("status") == "True":
            return f"Failed: {failed.get('reason')}: {failed.get('message')}"
        return None
    if expected.kind != FAILS:
        return None
    c = conds.get(expected.type or "", {})
    if c.get("status") == expected.status and c.get("reason") == expected.reason:
        message = str(c.get("message") or "")
        if not holds(message, expected.substring):
            return f"{expected.type}={expected.status} {expected.reason} without {expected.substring!r}: {message}"
        if len(message) > 400:
            return f"message over 400 characters ({len(message)}): {message[:200]}..."
        return "ok"
    if failed.get("status") == "True" or conds.get("Succeeded", {}).get("status") == "True":
        ended = failed if failed.get("status") == "True" else conds["Succeeded"]
        return (f"ended {ended.get('type')}={ended.get('status')} {ended.get('reason')}: "
                f"{ended.get('message')}; {expected.type}: {c or 'absent'}")
    return None
