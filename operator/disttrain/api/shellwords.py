"""The words a container's command hands a program, as the kubelet and a POSIX shell make them.

Two expansions happen before torchrun sees its options: the kubelet replaces ``$(NAME)``
in ``command``/``args`` by the container's variable NAME (``$$`` is a ``$``; an unknown
NAME stays as written), and a shell (``bash -c SCRIPT``) then splits its script into
commands and words: quotes, backslashes, ``\\<newline>`` line continuations,
``$NAME``/``${NAME}`` expansions, ``;``/``&&``/``||``/``|``/``&``/newlines between
commands, comments and redirections. :func:`kubelet_expand` and :func:`split_script` do
the same, far enough to read a launcher's options: no globbing, tilde, brace or
arithmetic expansion, no word splitting of an expanded value, a here-document's body read
as commands. A value the environment cannot tell (a command substitution, an unknown
variable, ``$1``) becomes :func:`unknown` of its name, so it never equals a value the
operator would pass. Both run in linear time and never raise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEFAULTED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(:?)-(.*)", re.S)
_SHELL_SYNTAX = re.compile(r"[$`'\"\\\s]")
_SPECIAL = set("@*#?$!-0123456789")
_DQ_ESCAPES = set('$`"\\\n')


def unknown(name: str) -> str:
    """The stand-in for an expansion whose value the environment does not tell: contains
    NUL, which no variable's value and no command line can."""
    return f"\x00{name}\x00"


def unknown_names(value: str) -> list[str]:
    """The names of the unknown expansions in an expanded value, in order."""
    return value.split("\x00")[1::2]


@dataclass(frozen=True)
class Word:
    """One word of a command: ``shown``, the text as written (for messages; line
    continuations removed), and ``value``, the text the program receives."""

    shown: str
    value: str


def kubelet_expand(text: str, env: Mapping[str, str]) -> tuple[str, list[tuple[int, int]]]:
    """``text`` after the kubelet's ``$(NAME)`` expansion with ``env``, and for every
    character of the result the span of ``text`` it came from."""
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith("$$", i):
            out.append("$")
            spans.append((i, i + 2))
            i += 2
            continue
        m = _NAME.match(text, i + 2) if text.startswith("$(", i) else None
        if m and text.startswith(")", m.end()) and m.group() in env:
            value = env[m.group()]
            out.append(value)
            spans += [(i, m.end() + 1)] * len(value)
            i = m.end() + 1
            continue
        out.append(text[i])
        spans.append((i, i + 1))
        i += 1
    return "".join(out), spans


def _join_lines(text: str, spans: list[tuple[int, int]]) -> tuple[str, list[tuple[int, int]]]:
    """``text`` without its line continuations (a backslash-newline outside single quotes
    and comments), which the shell removes before it reads words or names (``$A\\<nl>B``
    is ``$AB``); with the spans of what remains."""
    out: list[int] = []
    i, n, state = 0, len(text), ""
    while i < n:
        c = text[i]
        if state == "'":
            state = "" if c == "'" else state
        elif state == "#":
            state = "" if c == "\n" else state
        elif c == "\\":
            if text.startswith("\n", i + 1):
                i += 2
                continue
            out.append(i)
            i += 1
            if i >= n:
                break
        elif c == '"':
            state = "" if state == '"' else '"'
        elif c == "'" and state == "":
            state = "'"
        elif c == "#" and state == "" and (not out or text[out[-1]] in " \t\n;&|()"):
            state = "#"
        out.append(i)
        i += 1
    return "".join(text[k] for k in out), [spans[k] for k in out]


class _Unbalanced(Exception):
    """A quote, ``${``, ``$(`` or backquote the script never closes: the shell refuses it."""


class _Splitter:
    """One pass over an expanded script (see :func:`split_script`)."""

    def __init__(self, script: str, spans: list[tuple[int, int]], original: str, env: Mapping[str, str]):
        self.s, self.spans, self.original, self.env = script, spans, original, env
        self.commands: list[list[Word]] = []
        self.cur: list[Word] = []
        self.val: list[str] = []
        self.start: Optional[int] = None
        self.quoted = False
        self.redirect_target = False

    def begin(self, i: int) -> None:
        if self.start is None:
            self.start = i

    def end_word(self, end: int) -> None:
        if self.start is not None and (any(self.val) or self.quoted):
            if self.redirect_target:
                self.redirect_target = False
            else:
                shown = self.original[self.spans[self.start][0]:self.spans[end - 1][1]]
                self.cur.append(Word(shown.replace("\\\n", ""), "".join(self.val)))
        self.val, self.start, self.quoted = [], None, False

    def end_command(self, end: int) -> None:
        self.end_word(end)
        if self.cur:
            self.commands.append(self.cur)
        self.cur = []
        self.redirect_target = False

    def closing(self, i: int, ch: str) -> int:
        j = self.s.find(ch, i)
        if j < 0:
            raise _Unbalanced
        return j

    def dollar(self, i: int, in_double: bool) -> int:
        """Expand the ``$`` at ``i`` into self.val; the index after it."""
        s, nxt = self.s, self.s[i + 1:i + 2]
        if nxt == "{":
            j = self.closing(i + 2, "}")
            self.val.append(self.braced(s[i + 2:j]))
            return j + 1
        if nxt == "(":
            depth, j = 0, i + 1
            while j < len(s):
                depth += {"(": 1, ")": -1}.get(s[j], 0)
                if depth == 0:
                    self.val.append(unknown(s[i:j + 1][:40]))
                    return j + 1
                j += 1
            raise _Unbalanced
        m = _NAME.match(s, i + 1)
        if m:
            self.val.append(self.lookup(m.group()))
            return m.end()
        if nxt and nxt in _SPECIAL:
            self.val.append(unknown("$" + nxt))
            return i + 2
        if nxt == "'" and not in_double:  # bash's $'...': backslash escapes, no expansion
            j = i + 2
            while j < len(s) and s[j] != "'":
                if s[j] == "\\" and j + 1 < len(s):
                    j += 1
                self.val.append(s[j])
                j += 1
            if j >= len(s):
                raise _Unbalanced
            self.quoted = True
            return j + 1
        if nxt == '"' and not in_double:  # $"...": a locale string, a double-quoted one
            return i + 1
        self.val.append("$")
        return i + 1

    def lookup(self, name: str) -> str:
        return self.env[name] if name in self.env else unknown(name)

    def braced(self, inner: str) -> str:
        if _NAME.fullmatch(inner):
            return self.lookup(inner)
        m = _DEFAULTED.fullmatch(inner)  # ${NAME:-word}, ${NAME-word} of a known variable
        if m and m.group(1) in self.env:
            if self.env[m.group(1)] or not m.group(2):
                return self.env[m.group(1)]
            if not _SHELL_SYNTAX.search(m.group(3)):  # empty, and a plain default word
                return m.group(3)
        return unknown("${" + inner[:40] + "}")

    def double_quoted(self, i: int) -> int:
        """The double-quoted string opening at ``i``; the index after its closing quote."""
        s, j = self.s, i + 1
        self.quoted = True
        while j < len(s):
            c = s[j]
            if c == '"':
                return j + 1
            if c == "\\" and s[j + 1:j + 2] in _DQ_ESCAPES and j + 1 < len(s):
                if s[j + 1] != "\n":
                    self.val.append(s[j + 1])
                j += 2
            elif c == "$":
                j = self.dollar(j, True)
            elif c == "`":
                k = self.closing(j + 1, "`")
                self.val.append(unknown(s[j:k + 1][:40]))
                j = k + 1
            else:
                self.val.append(c)
                j += 1
        raise _Unbalanced

    def redirection(self, i: int) -> int:
        """The redirection operator at ``i`` (after an io number, if any); its target, the
        next word, is dropped."""
        if self.start is not None and not self.quoted and "".join(self.val).isdigit():
            self.val, self.start = [], None  # 2>&1: the 2 is the operator's
        else:
            self.end_word(i)
        m = re.compile(r"&>>?|<<<|<<-|<<|>>|<>|>\||[<>]&|[<>]").match(self.s, i)
        j = m.end() if m else i + 1
        if self.s[j - 1] == "&":
            k = re.compile(r"[0-9]+-?|-").match(self.s, j)
            if k:
                return k.end()
        self.redirect_target = True
        return j

    def run(self) -> list[list[Word]]:
        s, i, n = self.s, 0, len(self.s)
        while i < n:
            c = s[i]
            if c == "\\":
                if s[i + 1:i + 2] == "\n":
                    i += 2
                    continue
                self.begin(i)
                self.val.append(s[i + 1:i + 2] or "\\")
                self.quoted = True
                i += 2
            elif c == "'":
                self.begin(i)
                j = self.closing(i + 1, "'")
                self.val.append(s[i + 1:j])
                self.quoted = True
                i = j + 1
            elif c == '"':
                self.begin(i)
                i = self.double_quoted(i)
            elif c == "$":
                self.begin(i)
                i = self.dollar(i, False)
            elif c == "`":
                self.begin(i)
                j = self.closing(i + 1, "`")
                self.val.append(unknown(s[i:j + 1][:40]))
                i = j + 1
            elif c in " \t\r":
                self.end_word(i)
                i += 1
            elif c in "<>" or s.startswith("&>", i):
                i = self.redirection(i)
            elif c in "\n;&|()":
                self.end_command(i)
                i += 1
            elif c == "#" and self.start is None:
                j = s.find("\n", i)
                i = n if j < 0 else j
            else:
                self.begin(i)
                self.val.append(c)
                i += 1
        self.end_command(n)
        return self.commands


def split_script(script: str, env: Mapping[str, str]) -> Optional[list[list[Word]]]:
    """The simple commands of a shell script (``sh -c SCRIPT``), each a list of words,
    after the kubelet's and the shell's expansions with the variables ``env`` (name ->
    value; every other variable is :func:`unknown`). None when the shell would refuse the
    script (an unclosed quote, ``${``, ``$(`` or backquote). Never raises."""
    expanded, spans = _join_lines(*kubelet_expand(script, env))
    try:
        return _Splitter(expanded, spans, script, env).run()
    except _Unbalanced:
        return None


def argv_words(argv: list[str], env: Mapping[str, str]) -> list[Word]:
    """A container's argv (no shell) as words: each item after the kubelet's expansion."""
    return [Word(a, kubelet_expand(a, env)[0]) for a in argv]
