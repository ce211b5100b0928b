"""A shell command string read as a POSIX shell reads it, without running anything: `sh -c STRING NAME ARGS...`,
`bash -c ...`, a `--job-args` line, sbatch's `--wrap`.

Words are split at blanks and operators, with quoting ('...', "...", backslashes) removed. The positional parameters
of a `-c` string are expanded as the shell expands them (`"$@"` gives one word per parameter, `$*` and unquoted
parameters are split at blanks, `$1`, `${2}`, `$0`, `$#`). Nothing else is expanded: a `$NAME`, `${...}`, command
substitution (`$(...)`, backquotes) or arithmetic stays as it is written, so the job reader sees an unexpanded word,
never a setting (the working directory and the environment take `$NAME` from the job's environment, as the shell
would). Pathname expansion is not done: Hydra's `key=[a,b]` stays a word, as a shell leaves a pattern that matches
no file.

`commands` then takes the string apart into simple commands joined by `;`, `&&` and newlines. Every command before the
last must be one that only sets the shell's state for the job (`cd DIR`, `export NAME=VALUE`, `unset NAME`,
`NAME=VALUE`, `set -e`-style options, `:`, `true`, `echo`); output redirections are dropped. Anything else (a pipe,
`||`, a background `&`, input redirection, a compound command, `source`) is not followed, naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_COMMANDS = 64
MAX_WORDS = 10_000  # the job reader's own bound (keys.MAX_ARGS): "$@" repeated cannot make more
_PLAIN = re.compile(r"[^\s'\"\\$`~#;&|<>()]+")  # a run of characters that need no care outside quotes
_QUOTED = re.compile(r"[^\"\\$`]+")  # likewise inside double quotes


class ShellError(ValueError):
    """A string the shell itself would refuse (unbalanced quotes or parentheses)."""


@dataclass
class Word:
    """A shell word: its parts, each ("lit", text), ("var", `$NAME` as written) or ("sub", text as written)."""

    parts: list[tuple[str, str]] = field(default_factory=list)
    quoted: bool = False  # quotes make an empty word a word

    def text(self) -> str:
        """The word as the program would get it where nothing more is expanded (a `$NAME` stays as written)."""
        return "".join(text for _, text in self.parts)

    def expanded(self, env: dict[str, str]) -> str | None:
        """The word with `$NAME` taken from `env`; None where it holds another expansion or a name env lacks."""
        out = []
        for kind, text in self.parts:
            if kind == "lit":
                out.append(text)
            elif kind == "var" and _name(text) in env:
                out.append(env[_name(text)])
            else:
                return None
        return "".join(out)


def _name(raw: str) -> str:
    """The variable a `$NAME`, `${NAME}` or `~` part names."""
    return "HOME" if raw == "~" else raw.lstrip("$").strip("{}")


class Op(str):
    """A shell operator: `&&`, `;`, `|`, `>`, `2>&1`, a newline as ";"."""


_OPERATORS = ("&&", "||", ";;", "|&", "&>>", "&>", ">>", "<<<", "<<-", "<<", "<>", ">&", "<&", ">|", ";", "&", "|",
              "(", ")", "<", ">")


def _closing(text: str, i: int, open_: str, close: str) -> int:
    """The index just past the `close` that matches the `open_` before `i` (quotes and nesting respected)."""
    depth, quote = 1, ""
    while i < len(text):
        ch = text[i]
        if quote == "'":
            quote = "" if ch == "'" else quote
        elif ch == "\\":
            i += 1
        elif quote == '"':
            quote = "" if ch == '"' else quote
        elif ch in "'\"":
            quote = ch
        elif text.startswith(open_, i):
            depth += 1
            i += len(open_) - 1
        elif text.startswith(close, i):
            depth -= 1
            if depth == 0:
                return i + len(close)
        i += 1
    raise ShellError(f"unbalanced {open_!r}")


class _Scanner:
    def __init__(self, text: str, params: list[str] | None, name0: str) -> None:
        self.text, self.params, self.name0 = text, params, name0
        self.tokens: list[Word | Op] = []
        self.fields: list[Word] = [Word()]
        self.pending: list[str] = []  # literal text of the word being built, joined once (linear in the text)
        self.started = False
        self.saw_at = False  # a "$@" in the double quotes being read (with no parameters it makes no word)
        self.made = 0  # parts and words made so far: a "" that adds none makes an empty word
        self.words = 0

    # -- the word being built ----------------------------------------------------------------------------------
    def lit(self, text: str) -> None:
        self.pending.append(text)
        self.started = True
        self.made += 1

    def flush(self) -> None:
        if self.pending:
            self.fields[-1].parts.append(("lit", "".join(self.pending)))
            self.pending = []

    def field(self, word: Word) -> None:
        """A new field (a word of its own) from an expansion."""
        self.flush()
        self.words += 1
        if self.words > MAX_WORDS:
            raise ShellError(f"it makes more than {MAX_WORDS} words")
        self.fields.append(word)
        self.made += 1

    def part(self, kind: str, text: str) -> None:
        self.flush()
        self.fields[-1].parts.append((kind, text))
        self.started = True
        self.made += 1

    def split_in(self, value: str) -> None:
        """An unquoted expansion: split at blanks into the word being built."""
        self.flush()
        words = value.split()
        if not words:
            return
        if value[:1].isspace() and self.fields[-1].parts:
            self.field(Word())
        self.lit(words[0])
        for word in words[1:]:
            self.field(Word([("lit", word)]))
        if value[-1:].isspace():
            self.field(Word())

    def end_word(self) -> None:
        self.flush()
        if self.started:
            self.tokens += [f for f in self.fields if f.parts or f.quoted]
            self.words += 1
            if self.words > MAX_WORDS:
                raise ShellError(f"it makes more than {MAX_WORDS} words")
        self.fields, self.started = [Word()], False

    # -- parameters ------------------------------------------------------------------------------------------------
    def parameter(self, name: str, raw: str, quoted: bool) -> None:
        params = self.params
        if params is None or not (name.isdigit() or name in "@*#"):
            self.part("var" if name.isidentifier() else "sub", raw)
            return
        if name == "#":
            self.lit(str(len(params)))
        elif name == "@" and quoted:
            self.saw_at = True
            if params:
                self.lit(params[0])
                for param in params[1:]:
                    self.field(Word([("lit", param)]))
        elif name in "@*":
            if quoted:
                self.lit(" ".join(params))
            else:
                self.split_in(" ".join(params) if params else "")
        else:
            index = int(name)
            value = self.name0 if index == 0 else params[index - 1] if index <= len(params) else ""
            if quoted:
                self.lit(value)
            else:
                self.split_in(value)

    def dollar(self, i: int, quoted: bool) -> int:
        text = self.text
        nxt = text[i + 1:i + 2]
        if text.startswith("$((", i):
            end = _closing(text, i + 3, "((", "))")
            self.part("sub", text[i:end])
            return end
        if nxt == "(":
            end = _closing(text, i + 2, "(", ")")
            self.part("sub", text[i:end])
            return end
        if nxt == "{":
            end = _closing(text, i + 2, "{", "}")
            inner = text[i + 2:end - 1]
            if inner.isdigit() or inner in ("@", "*", "#") or inner.isidentifier():
                self.parameter(inner, text[i:end], quoted)
            else:
                self.part("sub", text[i:end])
            return end
        if nxt and (nxt.isdigit() or nxt in "@*#"):
            self.parameter(nxt, text[i:i + 2], quoted)
            return i + 2
        if nxt == "_" or nxt.isalpha():
            j = i + 1
            while j < len(text) and (text[j] == "_" or text[j].isalnum()):
                j += 1
            self.part("var", text[i:j])
            return j
        if nxt == "'" and not quoted:  # bash's $'...': its escapes are not read, so it is an expansion
            j = i + 2
            while j < len(text) and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            if j >= len(text):
                raise ShellError("unbalanced quotes")
            self.part("sub", text[i:j + 1])
            return j + 1
        if nxt and nxt in "?$!-":
            self.part("sub", text[i:i + 2])
            return i + 2
        self.lit("$")
        return i + 1

    # -- the scan ----------------------------------------------------------------------------------------------------
    def run(self) -> list[Word | Op]:
        text, i = self.text, 0
        while i < len(text):
            ch = text[i]
            if ch in " \t":
                self.end_word()
                i += 1
            elif ch == "\n":
                self.end_word()
                self.tokens.append(Op(";"))
                i += 1
            elif ch == "#" and not self.started:
                end = text.find("\n", i)
                i = len(text) if end < 0 else end
            elif ch == "\\":
                if text[i + 1:i + 2] == "\n":
                    i += 2
                    continue
                self.lit(text[i + 1:i + 2] or "\\")
                i += 2
            elif ch == "'":
                end = text.find("'", i + 1)
                if end < 0:
                    raise ShellError("unbalanced quotes")
                self.lit(text[i + 1:end])
                self.fields[-1].quoted = True
                i = end + 1
            elif ch == '"':
                i = self.double(i + 1)
            elif ch == "$":
                i = self.dollar(i, quoted=False)
            elif ch == "`":
                i = self.backquote(i)
            elif ch == "~" and not self.started and text[i + 1:i + 2] in ("", "/", " ", "\t", "\n", ";"):
                self.part("var", "~")
                i += 1
            else:
                op = next((o for o in _OPERATORS if text.startswith(o, i)), None)
                if op is None:
                    run = _PLAIN.match(text, i)
                    end = run.end() if run else i + 1
                    self.lit(text[i:end])
                    i = end
                    continue
                self.flush()
                number = ""
                field0 = self.fields[0]
                if op[0] in "<>" and len(self.fields) == 1 and not field0.quoted and \
                        all(k == "lit" and t.isdigit() for k, t in field0.parts) and field0.parts:
                    number, self.fields, self.started = "".join(t for _, t in field0.parts), [Word()], False
                self.end_word()
                self.tokens.append(Op(number + op))
                i += len(op)
        self.end_word()
        return self.tokens

    def backquote(self, i: int) -> int:
        """A `...` command substitution at `i`, quoted or not: one part the doctor cannot follow; where it ends."""
        end = self.text.find("`", i + 1)
        if end < 0:
            raise ShellError("unbalanced backquotes")
        self.part("sub", self.text[i:end + 1])
        return end + 1

    def double(self, i: int) -> int:
        text = self.text
        self.saw_at = False
        made = self.made
        while i < len(text):
            ch = text[i]
            if ch == '"':
                if not self.saw_at and made == self.made:
                    self.fields[-1].quoted = True  # "": an empty word
                    self.started = True
                return i + 1
            if ch == "\\" and text[i + 1:i + 2] in ("$", "`", '"', "\\", "\n"):
                if text[i + 1] != "\n":
                    self.lit(text[i + 1])
                i += 2
            elif ch == "$":
                i = self.dollar(i, quoted=True)
            elif ch == "`":
                i = self.backquote(i)
            else:
                run = _QUOTED.match(text, i)
                end = run.end() if run else i + 1
                self.lit(text[i:end])
                i = end
        raise ShellError("unbalanced quotes")


def tokens(text: str, params: list[str] | None = None, name0: str = "sh") -> list[Word | Op]:
    """The string's words and operators; `params`: the positional parameters (None: not expanded)."""
    return _Scanner(text, params, name0).run()


@dataclass
class Command:
    """One simple command: its `NAME=VALUE` prefixes and its words (output redirections dropped)."""

    assignments: list[tuple[str, Word]]
    words: list[Word]


SETUP_BUILTINS = {":", "true", "echo", "cd", "export", "unset", "set"}
COMPOUND = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "function",
            "select", "{", "}", "[[", "]]", "!", "coproc"}


def split_assignment(word: Word) -> tuple[str, Word] | None:
    """`NAME=VALUE` as a shell reads an assignment word: the name, and the value as a word of its own."""
    if not word.parts or word.parts[0][0] != "lit":
        return None
    first = word.parts[0][1]
    name, eq, rest = first.partition("=")
    if not eq or not name.isidentifier():
        return None
    return name, Word(([("lit", rest)] if rest else []) + word.parts[1:], quoted=True)


def commands(items: list[Word | Op]) -> tuple[list[Command], str | None]:
    """The simple commands of a string, up to the first one that replaces the shell (`exec`) or the last; and why
    the string is not followed, if it is not."""
    out: list[Command] = []
    current = Command([], [])
    i = 0
    while i < len(items):
        item = items[i]
        if isinstance(item, Op):
            op = item.lstrip("0123456789")
            if op in (";", "&&"):
                if current.words or current.assignments:
                    out.append(current)
                current = Command([], [])
                if len(out) > MAX_COMMANDS:
                    return out, f"it runs more than {MAX_COMMANDS} commands"
            elif op in (">", ">>", ">|", "&>", "&>>", ">&"):
                i += 1  # the redirection's target: the job's output goes elsewhere, which changes none of it
            elif op in ("<", "<<", "<<-", "<<<", "<>", "<&"):
                return out, f"`{item}` feeds the command's input"
            elif op in ("|", "|&") and current.words and _tee_stage(items, i + 1) is not None:
                i = _tee_stage(items, i + 1) or i  # `CMD | tee log`: tee copies the output, which changes none of it
                continue
            else:
                return out, f"`{item}` runs more than one command (a pipe, a list or a subshell)"
            i += 1
            continue
        assignment = split_assignment(item) if not current.words else None
        if assignment is not None:
            current.assignments.append(assignment)
            i += 1
            continue
        if not current.words and item.text() in COMPOUND:
            return out, f"`{item.text()}` is a compound command"
        current.words.append(item)
        i += 1
    if current.words or current.assignments:
        out.append(current)
    return out, None


def _tee_stage(items: list[Word | Op], start: int) -> int | None:
    """Where a pipeline's `tee [OPTIONS] [FILE...]` stage after a pipe ends (the index of the operator after it, or
    the end), when it is one whose words are plain (coreutils tee(1)); None otherwise."""
    words: list[Word] = []
    i = start
    for item in items[start:]:
        if not isinstance(item, Word):
            break
        words.append(item)
        i += 1
    if not words or words[0].text() not in ("tee", "/usr/bin/tee", "/bin/tee"):
        return None
    after = items[i] if i < len(items) else None
    if isinstance(after, Op) and after.lstrip("0123456789") in ("|", "|&"):
        return _tee_stage(items, i + 1)  # `| tee a | tee b`
    return i
