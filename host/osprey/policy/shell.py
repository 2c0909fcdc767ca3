"""Shell command lines parsed with tree-sitter-bash: the simple commands a line would run, and words.

Two views of one parse:

- `simple_commands`: every simple command as literal argv words after quote removal, the view saved
  approval rules are matched against, with `coverage_hazard` saying when a line runs code no argv
  word shows;
- `parse` plus `Expander`: the same commands with their syntax nodes, pipeline positions and
  redirections, and words expanded the way the hardline floor needs them (variables assigned earlier
  in the line, `~` and `$HOME`, brace expansion, `$(echo ...)`), with unknowable parts marked.

Everything is bounded: the line's size, the syntax tree's nesting, the words expanded and the
alternatives a word may stand for. Past a bound the caller gets `ShellParseError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

MAX_COMMAND_BYTES = 64 * 1024
MAX_NESTING = 256  # syntax-tree depth; deeper lines are refused as too complex
MAX_WORDS = 20_000  # words expanded per Budget (one floor check, nested strings included)
MAX_ALTERNATIVES = 64  # values one word or variable may stand for
MAX_FIELD = 64 * 1024  # characters in one expanded word
MAX_EXPANSION_DEPTH = 12  # $( "$( ... )" ) resolution depth

# Markers inside expanded words. They are private-use characters, so they never clash with text.
HOME = "\ue001"  # a home directory (`~`, `~user`, `$HOME`), only ever at the start of a word
UNKNOWN = "\ue000"  # text the parser cannot know (an unset variable, `$(make_path)`, `$RANDOM`)
# Text that may be anything at all, computed by code the line hides in a value: `${x@P}` (prompt
# expansion runs the value's command substitutions) or `${!x}` (indirection) of a value the line
# does not show.
ANYTHING = "\ue002"
MARKERS = (HOME, UNKNOWN, ANYTHING)
DEFAULT_IFS = " \t\n"
MAX_HIDDEN = 64  # command substitutions per line that the grammar leaves as text
MAX_HIDDEN_DEPTH = 4  # such substitutions inside such substitutions, parsed again as shell

_LANGUAGE = Language(tree_sitter_bash.language())
_EXPANSIONS = frozenset({"simple_expansion", "expansion", "command_substitution", "process_substitution", "arithmetic_expansion"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_GLOB_SPECIAL = frozenset("\\{},*?[]")
# Where an assignment is part of something else, not a statement of its own.
_NOT_STATEMENTS = frozenset({
    "command", "declaration_command", "variable_assignments", "c_style_for_statement", "arithmetic_expansion",
    "binary_expression", "unary_expression", "postfix_expression", "parenthesized_expression", "ternary_expression",
    "test_command", "compound_statement_arithmetic",
})
_CONTINUATION = re.compile(r"(?<!\\)((?:\\\\)*)\\\n")


class ShellParseError(Exception):
    """The line has a syntax error, or is too large or too complex to analyse within the bounds."""


@dataclass
class Budget:
    """Words expanded so far by one analysis (nested shell strings share it)."""

    words: int = 0
    limit: int = MAX_WORDS

    def spend(self, n: int = 1) -> None:
        self.words += n
        if self.words > self.limit:
            raise ShellParseError(f"the command line has more than {self.limit} words to examine")


# ---------------------------------------------------------------------------------------------
# Parsing and the command walk


@dataclass(eq=False)
class Command:
    """One thing the line does, in source order.

    kind: "command" (a simple command, a declaration such as `export A=1`, or `unset`), "assign"
    (a bare `a=1 b=2`), "for" (a for or select loop: `variable` takes each of `values`; a
    `for ((...))` loop has no variable), "function" (a
    definition: `variable` is its name, `body` its body), "redirect" (a file redirection anywhere,
    in `node`).
    """

    kind: Literal["command", "assign", "for", "function", "redirect"]
    node: Node
    words: list[Node] = field(default_factory=list)  # argv: name first
    prefix: list[Node] = field(default_factory=list)  # `A=1 cmd` assignments, shown before argv
    assigns: list[Node] = field(default_factory=list)  # assignments this command makes (prefix, bare, export)
    redirects: list[Node] = field(default_factory=list)  # this command's redirections, heredocs included
    pipes: tuple[tuple[int, int], ...] = ()  # (pipeline id, stage) from the outermost pipeline inwards
    variable: str = ""
    values: list[Node] = field(default_factory=list)
    body: Node | None = None

    def within(self, node: Node) -> bool:
        return node.start_byte <= self.node.start_byte and self.node.end_byte <= node.end_byte


@dataclass
class Parsed:
    """A parsed line: its source bytes, root node and the commands in source order."""

    source: bytes
    root: Node
    commands: list[Command]
    _hidden: list[Hidden] | None = field(default=None, repr=False)

    def text(self, node: Node) -> str:
        return self.source[node.start_byte:node.end_byte].decode("utf-8", "replace")

    def hidden(self) -> list[Hidden]:
        """The command substitutions bash would run that the grammar leaves as text (computed once)."""
        if self._hidden is None:
            self._hidden = _hidden_substitutions(self)
        return self._hidden

    def hides(self, node: Node) -> bool:
        """Whether a hidden command substitution starts inside this node."""
        return any(node.start_byte <= h.start < node.end_byte for h in self.hidden())


@dataclass(frozen=True)
class Hidden:
    """A command substitution the grammar leaves as text: where it starts, and its command text
    (backslash escapes of backticks already undone)."""

    start: int
    text: str


def parse(command: str) -> Parsed:
    """Parse a command line; ShellParseError when it has a syntax error or exceeds the bounds."""
    if len(command) > MAX_COMMAND_BYTES:
        raise ShellParseError(f"the command line is longer than {MAX_COMMAND_BYTES // 1024} KiB")
    # bash removes backslash-newline before it splits words (`r\<newline>m` is `rm`); the grammar
    # treats it as a space, so it is removed first (inside single quotes too, where bash keeps it:
    # that only changes the text of a quoted word).
    source = _CONTINUATION.sub(r"\1", command).encode("utf-8", "surrogatepass")
    if len(source) > MAX_COMMAND_BYTES:
        raise ShellParseError(f"the command line is longer than {MAX_COMMAND_BYTES // 1024} KiB")
    tree = Parser(_LANGUAGE).parse(source)
    root = tree.root_node
    if root.has_error:
        raise ShellParseError(f"the command line has a syntax error near {_error_excerpt(source, root)!r}")
    return Parsed(source, root, list(_walk(root)))


def _error_excerpt(source: bytes, root: Node) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            start = max(0, node.start_byte - 10)
            return source[start:node.end_byte + 10].decode("utf-8", "replace")[:60]
        stack.extend(reversed([c for c in node.children if c.has_error or c.is_missing]))
    return ""


def _walk(root: Node) -> Iterator[Command]:
    """Pre-order walk yielding commands with the pipeline stages they sit in."""
    # The grammar puts what follows a heredoc start (`cat <<EOF | sh`) inside the heredoc redirect;
    # the pipeline found there continues the statement's pipeline at stage 1.
    stack: list[tuple[Node, tuple[tuple[int, int], ...], int]] = [(root, (), 0)]
    while stack:
        node, pipes, depth = stack.pop()
        if depth > MAX_NESTING:
            raise ShellParseError(f"the command line is nested more than {MAX_NESTING} levels deep")
        kind = node.type
        children = node.children
        child_pipes: list[tuple[tuple[int, int], ...]] | None = None
        if kind == "command":
            yield _simple(node, pipes)
        elif kind in ("declaration_command", "unset_command"):
            words = [children[0]] + [c for c in children[1:] if c.is_named and c.type != "comment"]
            yield Command("command", node, words=words, assigns=[c for c in children if c.type == "variable_assignment"], pipes=pipes)
        elif kind == "variable_assignment" and node.parent is not None and node.parent.type not in _NOT_STATEMENTS:
            yield Command("assign", node, prefix=[node], assigns=[node], pipes=pipes)
        elif kind == "variable_assignments":
            assigns = [c for c in children if c.type == "variable_assignment"]
            yield Command("assign", node, prefix=assigns, assigns=assigns, pipes=pipes)
        elif kind == "for_statement":
            var = node.child_by_field_name("variable")
            yield Command("for", node, variable=_node_text(var), values=node.children_by_field_name("value"), pipes=pipes)
        elif kind == "c_style_for_statement":
            yield Command("for", node, pipes=pipes)
        elif kind == "function_definition":
            name = node.child_by_field_name("name")
            yield Command("function", node, variable=_node_text(name), body=node.child_by_field_name("body"), pipes=pipes)
        elif kind == "file_redirect":
            yield Command("redirect", node, pipes=pipes)
        elif kind == "pipeline":
            offset = 1 if node.parent is not None and node.parent.type == "heredoc_redirect" else 0
            child_pipes = []
            stage = offset
            for child in children:
                child_pipes.append(pipes + ((node.id, stage),))
                if child.is_named:
                    stage += 1
        elif kind == "redirected_statement":
            inner = _heredoc_pipeline(node)
            if inner is not None:
                body = node.child_by_field_name("body")
                child_pipes = [pipes + ((inner.id, 0),) if c == body else pipes for c in children]
        for i in range(len(children) - 1, -1, -1):
            stack.append((children[i], child_pipes[i] if child_pipes is not None else pipes, depth + 1))


def _heredoc_pipeline(statement: Node) -> Node | None:
    for child in statement.children:
        if child.type == "heredoc_redirect":
            for sub in child.children:
                if sub.type == "pipeline":
                    return sub
    return None


def _simple(node: Node, pipes: tuple[tuple[int, int], ...]) -> Command:
    words: list[Node] = []
    assigns: list[Node] = []
    redirects: list[Node] = []
    for child in node.children:
        if child.type == "variable_assignment":
            assigns.append(child)
        elif child.type in _REDIRECTS:
            redirects.append(child)
        elif child.type == "command_name":
            words.append(child.named_children[0] if child.named_child_count == 1 else child)
        elif child.is_named and child.type != "comment":
            words.append(child)
    parent = node.parent
    if parent is not None and parent.type == "redirected_statement" and parent.child_by_field_name("body") == node:
        redirects.extend(c for c in parent.children if c.type in _REDIRECTS)
    extra = [w for r in redirects for w in redirect_arguments(r)]
    if extra and words:
        words = sorted(words + extra, key=lambda n: n.start_byte)
    # `bash 0< <(cmd)`: the grammar may read the descriptor of a redirection as a word
    starts = {r.start_byte for r in redirects}
    words = [w for w in words if not (w.type == "number" and w.end_byte in starts)]
    return Command("command", node, words=words, prefix=assigns, assigns=assigns, redirects=redirects, pipes=pipes)


def redirect_destination(redirect: Node) -> Node | None:
    """The file a redirection opens or the descriptor it duplicates (its first destination)."""
    found = redirect.children_by_field_name("destination")
    return found[0] if found else None


def redirect_descriptor(source: bytes, redirect: Node) -> str | None:
    """The descriptor a redirection names (`2>`, `0<`), also where the grammar read it as a word."""
    for child in redirect.children:
        if child.type == "file_descriptor":
            return source[child.start_byte:child.end_byte].decode("ascii", "replace")
    start = end = redirect.start_byte
    while start > 0 and end - start < 10 and 0x30 <= source[start - 1] <= 0x39:
        start -= 1
    if start < end and (start == 0 or source[start - 1:start].isspace()):
        return source[start:end].decode("ascii")
    return None


def redirect_arguments(redirect: Node) -> list[Node]:
    """Words the grammar puts inside a redirection that bash gives the command as arguments: in
    `rm >/dev/null -rf /` the redirection is `>/dev/null` and `-rf /` are rm's arguments. A number
    written right before the next redirection's operator (`0>&1`) is that redirection's descriptor."""
    if redirect.type != "file_redirect":
        return []
    found = redirect.children_by_field_name("destination")[1:]
    following = redirect.next_sibling
    if (found and found[-1].type == "number" and found[-1] == redirect.children[-1] and following is not None
            and following.type in _REDIRECTS and following.start_byte == found[-1].end_byte):
        found = found[:-1]
    return found


def _node_text(node: Node | None) -> str:
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------------
# Command substitutions the grammar leaves as text
#
# tree-sitter-bash parses `$(...)` almost everywhere, but leaves some substitutions bash runs as
# plain text: backticks in an unquoted here-document body and in a `${x:-...}` (or `#`, `%`, `/`,
# `^`, `,`) operand, quotes inside a double-quoted `${...}` (where bash keeps `'` as a character,
# so `"${x:-'$(cmd)'}"` runs cmd) and in here-document bodies, and escaped backticks or dollars
# inside backticks (`` `echo \`cmd\`` ``, which bash unescapes before parsing the inner command).
# These are found by scanning every piece of text the grammar did not parse as a substitution.

_DELIMITED = frozenset({"command_substitution", "process_substitution", "arithmetic_expansion"})
_QUOTED_LITERALS = frozenset({"raw_string", "ansi_c_string"})
_BACKSLASH, _BACKTICK, _DOLLAR, _OPEN, _CLOSE, _SQUOTE, _DQUOTE = 0x5C, 0x60, 0x24, 0x28, 0x29, 0x27, 0x22


def _hidden_substitutions(parsed: Parsed) -> list[Hidden]:
    src = parsed.source
    found: list[Hidden] = []
    # Pieces of text to scan: (start, end, end of the enclosing context, double-quote-like context)
    spans: list[tuple[int, int, int, bool]] = []
    stack: list[tuple[Node, bool, int, int]] = [(parsed.root, False, len(src), 0)]
    while stack:
        node, dq, context_end, depth = stack.pop()
        if depth > MAX_NESTING:
            raise ShellParseError(f"the command line is nested more than {MAX_NESTING} levels deep")
        kind = node.type
        if kind in ("comment", "heredoc_start", "heredoc_end"):
            continue
        if kind == "heredoc_body":
            if _quoted_heredoc(node):
                continue  # <<'EOF', <<"EOF", <<\EOF: the body is not expanded
            dq, context_end = True, node.end_byte
        elif kind in ("string", "translated_string"):
            dq, context_end = True, node.end_byte
        elif kind == "expansion":
            context_end = node.end_byte
        elif kind == "command_substitution":
            if src[node.start_byte] == _BACKTICK and node.end_byte - node.start_byte >= 2:
                content = src[node.start_byte + 1:node.end_byte - 1].decode("utf-8", "replace")
                unescaped = _backtick_unescape(content, dq)
                if unescaped != content:
                    # bash undoes \` \$ \\ before it parses the inner command; the grammar did not
                    found.append(Hidden(node.start_byte, unescaped))
                    continue
            dq, context_end = False, node.end_byte - 1
        elif kind == "process_substitution":
            dq, context_end = False, node.end_byte - 1
        elif kind in _QUOTED_LITERALS:
            if dq:  # `'` and `$'` are plain characters in a double-quote-like context
                spans.append((node.start_byte, node.end_byte, context_end, dq))
            continue
        children = node.children
        if not children:
            spans.append((node.start_byte, node.end_byte, context_end, dq))
            continue
        pos = node.start_byte
        for child in children:
            if child.start_byte > pos:
                spans.append((pos, child.start_byte, context_end, dq))
            pos = max(pos, child.end_byte)
        if node.end_byte > pos:
            spans.append((pos, node.end_byte, context_end, dq))
        for child in reversed(children):
            if kind in _DELIMITED and not child.is_named:
                continue  # the `$(`, backticks, `$((` and `)` of a substitution the grammar parsed
            stack.append((child, dq, context_end, depth + 1))
    spans.sort()
    resume = 0
    for start, end, context_end, dq in spans:
        i = max(start, resume)
        while i < end:
            byte = src[i]
            if byte == _DOLLAR and src[i + 1:i + 3] == b"((":
                i += 3  # arithmetic; a substitution inside it is found on the way
                continue
            if (byte == _BACKTICK or (byte == _DOLLAR and src[i + 1:i + 2] == b"(")) and not _escaped(src, i):
                text, after = _extract(src, i, max(context_end, end), dq)
                found.append(Hidden(i, text))
                if len(found) > MAX_HIDDEN:
                    raise ShellParseError(f"the command line hides more than {MAX_HIDDEN} command substitutions in text")
                resume = i = after
                continue
            i += 1
    found.sort(key=lambda h: h.start)
    return found


def _quoted_heredoc(body: Node) -> bool:
    parent = body.parent
    if parent is None:
        return False
    for child in parent.children:
        if child.type == "heredoc_start":
            return any(c in (child.text or b"") for c in b"'\"\\")
    return False


def _escaped(src: bytes, i: int) -> bool:
    """Whether the character at i follows an odd run of backslashes."""
    n = 0
    while i - n - 1 >= 0 and src[i - n - 1] == _BACKSLASH:
        n += 1
    return n % 2 == 1


def _backtick_unescape(content: str, dq: bool) -> str:
    """The command inside backticks as bash reads it: `\\\\`, `\\``, `\\$` (and `\\"` inside double
    quotes) lose their backslash."""
    keep = '\\`$"' if dq else "\\`$"
    return re.sub(r"\\(.)", lambda m: m.group(1) if m.group(1) in keep else m.group(0), content, flags=re.DOTALL)


def _extract(src: bytes, i: int, limit: int, dq: bool) -> tuple[str, int]:
    """The command text of the substitution starting at i (a backtick or `$(`), and where it ends.
    An unterminated one runs to `limit`."""
    limit = min(limit, len(src))
    if src[i] == _BACKTICK:
        j = i + 1
        while j < limit and src[j] != _BACKTICK:
            j += 2 if src[j] == _BACKSLASH else 1
        content = src[i + 1:min(j, limit)].decode("utf-8", "replace")
        return _backtick_unescape(content, dq), min(j + 1, limit)
    j = i + 2
    depth = 1
    while j < limit:
        c = src[j]
        if c == _BACKSLASH:
            j += 2
            continue
        if c in (_SQUOTE, _BACKTICK):
            close = src.find(bytes([c]), j + 1, limit)
            j = limit if close < 0 else close + 1
            continue
        if c == _DQUOTE:
            j += 1
            while j < limit and src[j] != _DQUOTE:
                j += 2 if src[j] == _BACKSLASH else 1
            j += 1
            continue
        if c == _OPEN:
            depth += 1
        elif c == _CLOSE:
            depth -= 1
            if depth == 0:
                return src[i + 2:j].decode("utf-8", "replace"), j + 1
        j += 1
    return src[i + 2:limit].decode("utf-8", "replace"), limit


def substitution_texts(text: str, limit: int = MAX_HIDDEN) -> list[str]:
    """The commands of the `$(...)` and backtick substitutions in a piece of text, wherever they
    are (quotes are not taken into account): what bash would run if it expanded the text again,
    as prompt expansion (`${x@P}`) and array subscripts in arithmetic do."""
    src = text.encode("utf-8", "surrogatepass")
    found: list[str] = []
    i = 0
    while i < len(src) and len(found) < limit:
        byte = src[i]
        if byte == _DOLLAR and src[i + 1:i + 3] == b"((":
            i += 3
            continue
        if (byte == _BACKTICK or (byte == _DOLLAR and src[i + 1:i + 2] == b"(")) and not _escaped(src, i):
            inner, i = _extract(src, i, len(src), False)
            found.append(inner)
            continue
        i += 1
    return found


# ---------------------------------------------------------------------------------------------
# Literal words (quote removal only): the approvals view


def simple_commands(command: str) -> list[list[str]]:
    """Every simple command the line would run, literally, as argv words after quote removal
    (`r''m` -> `rm`, `\\rm` -> `rm`, `"rm"` -> `rm`), in source order, following ;, &&, ||, |, &,
    subshells, { } groups, if/while/for/case bodies, functions' bodies, $(...), backticks, <(...).
    Words containing an expansion that is not resolved keep their source text (e.g. `$d`).
    No unwrapping of sudo/env/sh -c here: this is what saved approval rules are matched against
    (a rule for `git status` must not cover `git status && curl x | sh`: that line yields
    [["git","status"],["curl","x"],["sh"]]). Raises ShellParseError when the line has syntax errors
    or is too large.

    Assignments are kept as words: `CC=gcc make` yields ["CC=gcc", "make"] (they change what the
    command does), `export A=1` yields ["export", "A=1"] and a bare `a=1 b=2` yields ["a=1", "b=2"].
    A `for` or `select` loop assigns its variable, so its header is listed too: `for p in a b` yields
    ["for", "p", "in", "a", "b"], `for ((i=0; i<3; i++))` yields ["for", "((", "i=0; i<3; i++", "))"].
    Command substitutions the grammar leaves as text (backticks in a here-document body or in a
    `${x:-...}` operand, see `Parsed.hidden`) are parsed as shell and their commands listed after
    the line's own. Redirections are not argv words and are not listed."""
    return commands_of(parse(command))


def commands_of(parsed: Parsed) -> list[list[str]]:
    """`simple_commands` of a line already parsed."""
    return _listed(parsed, Budget(), 0)


def _listed(parsed: Parsed, budget: Budget, depth: int) -> list[list[str]]:
    result: list[list[str]] = []
    for cmd in parsed.commands:
        argv: list[str] = []
        if cmd.kind == "for":
            argv = loop_header(parsed, cmd)
            budget.spend(len(argv))
        elif cmd.kind in ("command", "assign"):
            for node in cmd.prefix + cmd.words:
                budget.spend()
                argv.append(literal(parsed, node))
        if argv:
            result.append(argv)
    for hidden in parsed.hidden():
        if depth >= MAX_HIDDEN_DEPTH:
            raise ShellParseError(f"command substitutions are hidden in text more than {MAX_HIDDEN_DEPTH} levels deep")
        budget.spend()
        result.extend(_listed(parse(hidden.text), budget, depth + 1))
    return result


def loop_header(parsed: Parsed, cmd: Command) -> list[str]:
    """A `for`/`select` loop's header as argv words: the keyword, the variable, `in` and the values
    (after quote removal), or for `for ((...))` the keyword and the arithmetic."""
    node = cmd.node
    keyword = next((parsed.text(c) for c in node.children if not c.is_named), "for")
    if node.type == "c_style_for_statement":
        body = node.child_by_field_name("body")
        header_end = body.start_byte if body is not None else node.end_byte
        opening = next((c for c in node.children if c.type == "(("), None)
        closing = next((c for c in node.children if c.type == "))"), None)
        start = opening.end_byte if opening is not None else node.start_byte
        end = closing.start_byte if closing is not None else header_end
        return [keyword, "((", parsed.source[start:end].decode("utf-8", "replace").strip(), "))"]
    argv = [keyword, cmd.variable]
    if any(c.type == "in" for c in node.children):
        argv.append("in")
        argv.extend(literal(parsed, v) for v in cmd.values)
    return argv


# ---------------------------------------------------------------------------------------------
# Lines no command rule may cover
#
# A rule matches argv words. Some lines run code that no argv word shows, through bash evaluating
# text a second time: array subscripts are evaluated as arithmetic, and arithmetic expands a
# subscript it finds in a variable's value (`x='a[$(cmd)]'; echo $((x))`, `printf -v 'a[$(cmd)]'`,
# `read 'a[$(cmd)]'`, `test -v`, `[[ -v ]]`, `declare`, `let`, `unset`); prompt expansion runs the
# value's substitutions (`${x@P}`); indirection names a variable by a value (`${!x}`). Such lines
# are never covered by a command rule: `coverage_hazard` says why.

_PLACEHOLDER = "\ue000"
_WORDISH = frozenset({"word", "raw_string", "ansi_c_string", "string", "translated_string", "concatenation"})
_WORD_PARTS = frozenset({"concatenation", "string", "translated_string"})
_ARITHMETIC_TEXT = re.compile(r"[0-9\s+\-*/%<>=!&|^~?:,()]*")
_PLAIN_INDEX = re.compile(r"\s*(?:-?[0-9]+|@|\*)\s*")
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TEST_ARITHMETIC = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_TEST_NAMES = frozenset({"-v", "-R"})
# Builtins that take variable names (which may carry an evaluated subscript) or evaluate arithmetic;
# with the option that makes them do so where it takes one.
SETTERS: dict[str, tuple[str, ...]] = {
    "read": (), "mapfile": (), "readarray": (), "getopts": (), "declare": (), "typeset": (), "local": (),
    "export": (), "readonly": (), "unset": (), "let": (), "printf": ("-v",), "wait": ("-p",),
    "test": tuple(_TEST_NAMES), "[": tuple(_TEST_NAMES),
}
_PROMPT_OPERATORS = frozenset({"P", "E", "A"})


def coverage_hazard(parsed: Parsed) -> str | None:
    """Why no command rule may cover this line (code that runs without an argv word showing it),
    or None. See the section comment above and docs/approvals.md."""
    if parsed.hidden():
        return "it hides a command substitution in text (a backtick in a here-document or in a ${...} operand, or an escaped one in backticks)"
    stack: list[tuple[Node, int]] = [(parsed.root, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise ShellParseError(f"the command line is nested more than {MAX_NESTING} levels deep")
        why = _node_hazard(parsed, node)
        if why is not None:
            return why
        stack.extend((c, depth + 1) for c in node.children)
    for cmd in parsed.commands:
        if cmd.kind == "command":
            why = _command_hazard(parsed, cmd)
            if why is not None:
                return why
    return None


def _node_hazard(parsed: Parsed, node: Node) -> str | None:
    kind = node.type
    if kind in _WORDISH and (node.parent is None or node.parent.type not in _WORD_PARTS):
        text = _placeheld(parsed, node)
        if "$(" in text or "`" in text:
            return f"the word {_cut(parsed.text(node))} holds `$(` or a backtick, which bash evaluates where it takes a variable name or arithmetic"
        if kind == "concatenation" and re.fullmatch(r"\{[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\}", text) and parsed.source[node.end_byte:node.end_byte + 1] in (b"<", b">"):
            return f"the redirection {_cut(parsed.text(node))}> assigns a variable"
    elif kind == "expansion":
        named = node.named_children
        target = named[0] if named else None
        anon = [(c.type, c.start_byte) for c in node.children if not c.is_named]
        if target is not None and any(t == "!" and at < target.start_byte for t, at in anon):
            return f"the indirect expansion {_cut(parsed.text(node))} names a variable by a value"
        after = [t for t, at in anon if target is None or at > target.end_byte - 1]
        for i, t in enumerate(after):
            if t == "@" and i + 1 < len(after) and after[i + 1] in _PROMPT_OPERATORS:
                return f"the expansion {_cut(parsed.text(node))} evaluates a value (prompt expansion runs its command substitutions)"
            if t in (":=", "="):
                return f"the expansion {_cut(parsed.text(node))} assigns a variable"
        if ":" in after and target is not None:
            offset = parsed.source[target.end_byte:node.end_byte - 1].decode("utf-8", "replace").lstrip(":")
            if not _ARITHMETIC_TEXT.fullmatch(offset):
                return f"the offset in {_cut(parsed.text(node))} is evaluated as arithmetic"
    elif kind == "subscript":
        index = node.child_by_field_name("index")
        text = parsed.text(index) if index is not None else ""
        if not _PLAIN_INDEX.fullmatch(text):
            return f"the array subscript in {_cut(parsed.text(node))} is evaluated as arithmetic"
    elif kind in ("arithmetic_expansion", "c_style_for_statement") or (kind == "compound_statement" and node.children and node.children[0].type == "(("):
        text = _arithmetic_text(parsed, node)
        if not _ARITHMETIC_TEXT.fullmatch(text):
            return f"the arithmetic {_cut(text)} evaluates variables, whose values bash may evaluate again"
    elif kind == "test_operator":
        operator = parsed.text(node)
        parent = node.parent
        if parent is not None and (operator in _TEST_ARITHMETIC or operator in _TEST_NAMES):
            for operand in parent.named_children:
                if operand == node:
                    continue
                text = _placeheld(parsed, operand)
                plain = _PLAIN_NAME.fullmatch(text) if operator in _TEST_NAMES else _ARITHMETIC_TEXT.fullmatch(text)
                if not plain:
                    return f"the test {_cut(parsed.text(parent))} evaluates {_cut(parsed.text(operand))}"
    return None


def evaluated_operands(parsed: Parsed) -> list[Node]:
    """The operands `[[ ]]` and `[ ]` evaluate as a variable name or arithmetic (of -v, -R, -eq,
    -lt, ...), where a subscript runs its command substitutions."""
    found: list[Node] = []
    stack: list[tuple[Node, int]] = [(parsed.root, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise ShellParseError(f"the command line is nested more than {MAX_NESTING} levels deep")
        if node.type == "test_operator" and node.parent is not None:
            if parsed.text(node) in _TEST_ARITHMETIC or parsed.text(node) in _TEST_NAMES:
                found.extend(c for c in node.parent.named_children if c != node)
        stack.extend((c, depth + 1) for c in node.children)
    return found


def _arithmetic_text(parsed: Parsed, node: Node) -> str:
    parts = [c for c in node.children if c.type not in ("$((", "$[", "((", "))", "]", "for", "do_group", ";")]
    if node.type == "c_style_for_statement":
        body = node.child_by_field_name("body")
        parts = [c for c in parts if c != body]
    return " ".join(parsed.text(c) for c in parts)


def _command_hazard(parsed: Parsed, cmd: Command) -> str | None:
    nodes = list(cmd.words)
    names = [_placeheld(parsed, n) for n in nodes]
    while names and names[0] in ("command", "builtin"):
        nodes, names = nodes[1:], names[1:]
        while names and names[0].startswith("-"):
            nodes, names = nodes[1:], names[1:]
    if not names:
        return None
    name = names[0]
    if name in ("mapfile", "readarray") and any(w.startswith("-C") for w in names[1:]):
        return f"{name} -C runs a callback given as shell code"
    options = SETTERS.get(name)
    if options is None or (options and not any(w.startswith(o) for w in names[1:] for o in options)):
        return None
    for node, text in zip(nodes[1:], names[1:], strict=True):
        if "[" in text or _PLACEHOLDER in text or _has_expansion(node):
            return f"{name} takes {_cut(parsed.text(node))} as a variable name or arithmetic, which bash evaluates"
    return None


def _placeheld(parsed: Parsed, node: Node) -> str:
    """A word after quote removal, each expansion replaced by one placeholder character."""
    kind = node.type
    if kind in _EXPANSIONS:
        return _PLACEHOLDER
    if kind == "word":
        return _unescape(parsed.text(node))
    if kind == "raw_string":
        return parsed.text(node)[1:-1]
    if kind == "ansi_c_string":
        return ansi_c(parsed.text(node)[2:-1])
    if kind in ("string", "translated_string"):
        return "".join(_string_parts(parsed, node, lambda n: _placeheld(parsed, n)))
    if kind == "concatenation":
        return "".join(_placeheld(parsed, c) for c in node.children)
    if kind == "variable_assignment":
        value = node.child_by_field_name("value")
        head = parsed.text(node)[: (value.start_byte - node.start_byte) if value is not None else None]
        return head + (_placeheld(parsed, value) if value is not None else "")
    return parsed.text(node)


def _cut(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def literal(parsed: Parsed, node: Node) -> str:
    """A word after quote removal, or its source text when it holds an expansion."""
    if _has_expansion(node):
        return parsed.text(node)
    return _literal(parsed, node)


def _has_expansion(node: Node) -> bool:
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in _EXPANSIONS:
            return True
        stack.extend(n.children)
    return False


def _literal(parsed: Parsed, node: Node) -> str:
    kind = node.type
    if kind == "word":
        return _unescape(parsed.text(node))
    if kind == "raw_string":
        return parsed.text(node)[1:-1]
    if kind == "ansi_c_string":
        return ansi_c(parsed.text(node)[2:-1])
    if kind in ("string", "translated_string"):
        return "".join(_string_parts(parsed, node, lambda n: parsed.text(n)))
    if kind == "concatenation":
        return "".join(_literal(parsed, c) for c in node.children)
    if kind == "variable_assignment":
        value = node.child_by_field_name("value")
        head = parsed.text(node)[: (value.start_byte - node.start_byte) if value is not None else None]
        return head + (_literal(parsed, value) if value is not None else "")
    return parsed.text(node)


def _string_parts(parsed: Parsed, node: Node, inner: Callable[[Node], str]) -> Iterator[str]:
    """A double-quoted string's pieces: literal text (backslash rules of "..." applied) between the
    children, each child through `inner`."""
    start = node.start_byte + (2 if node.type == "translated_string" else 1)
    end = node.end_byte - 1
    pos = start
    for child in node.children:
        if not child.is_named:
            continue
        if child.start_byte > pos:
            yield _dq_unescape(parsed.source[pos:child.start_byte].decode("utf-8", "replace"))
        if child.type == "string_content":
            yield _dq_unescape(parsed.text(child))
        else:
            yield inner(child)
        pos = child.end_byte
    if end > pos:
        yield _dq_unescape(parsed.source[pos:end].decode("utf-8", "replace"))


def _unescape(text: str) -> str:
    """Unquoted backslashes: `\\x` is `x`."""
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _dq_unescape(text: str) -> str:
    """Inside double quotes a backslash only escapes $ ` " \\ and newline."""
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


_ANSI_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
_ANSI = re.compile(r"\\(?:([abeEfnrtv\\'\"?])|x([0-9a-fA-F]{1,2})|u([0-9a-fA-F]{1,4})|U([0-9a-fA-F]{1,8})|([0-7]{1,3})|c(.))", re.DOTALL)


def ansi_c(body: str) -> str:
    """The value of `$'...'` (its body without `$'` and `'`)."""

    def one(m: re.Match[str]) -> str:
        simple, hx, u4, u8, octal, ctrl = m.groups()
        if simple:
            return _ANSI_SIMPLE[simple]
        if ctrl:
            return chr(ord(ctrl) & 0x1F)
        number = int(hx, 16) if hx else int(u4 or u8, 16) if (u4 or u8) else int(octal, 8)
        if number >= 0x110000 or 0xD800 <= number < 0xE000 or chr(number) in MARKERS:
            return "\ufffd"  # not a character, or one of the floor's markers
        return chr(number)

    return _ANSI.sub(one, body)


# ---------------------------------------------------------------------------------------------
# Expansion: the floor's view of words


def _escape(text: str) -> str:
    """Quote text for the internal pattern form, where a backslash makes the next character literal."""
    return "".join("\\" + c if c in _GLOB_SPECIAL else c for c in text)


def unescape(pattern: str) -> str:
    """The text of an internal pattern once brace expansion is done."""
    return _unescape(pattern)


def brace_expand(pattern: str, limit: int = MAX_ALTERNATIVES) -> list[str]:
    """bash brace expansion of an internal pattern (`/{,}` -> `/`, `/`; `{a..c}`), bounded."""
    done: list[str] = []
    todo = [pattern]
    while todo:
        current = todo.pop()
        group = _brace_group(current)
        if group is None:
            done.append(current)
        else:
            start, end, alternatives = group
            todo.extend(current[:start] + alt + current[end:] for alt in reversed(alternatives))
        if len(done) + len(todo) > limit:
            raise ShellParseError(f"a word expands to more than {limit} words")
    return done


def _braced(pattern: str) -> list[str]:
    """brace_expand, then tilde expansion of the words it made, as bash does (`{rm,-rf,~}`)."""
    words = brace_expand(pattern)
    if len(words) < 2:
        return words
    return [HOME + (w[w.find("/"):] if "/" in w else "") if w.startswith("~") and not w.startswith("~\\") else w for w in words]


def _brace_group(s: str) -> tuple[int, int, list[str]] | None:
    """The first expandable `{...}` in s: (start, end, alternatives)."""
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth = 0
            commas: list[int] = []
            j = i
            while j < len(s):
                d = s[j]
                if d == "\\":
                    j += 2
                    continue
                if d == "{":
                    depth += 1
                elif d == "}":
                    depth -= 1
                    if depth == 0:
                        break
                elif d == "," and depth == 1:
                    commas.append(j)
                j += 1
            else:
                return None
            if commas:
                bounds = [i] + commas + [j]
                return i, j + 1, [s[bounds[k] + 1:bounds[k + 1]] for k in range(len(bounds) - 1)]
            seq = _sequence(s[i + 1:j])
            if seq is not None:
                return i, j + 1, seq
        i += 1
    return None


_SEQUENCE = re.compile(r"(-?\d{1,6})\.\.(-?\d{1,6})|([a-zA-Z])\.\.([a-zA-Z])")


def _sequence(body: str) -> list[str] | None:
    m = _SEQUENCE.fullmatch(body)
    if m is None:
        return None
    if m.group(1) is not None:
        a, b = int(m.group(1)), int(m.group(2))
    else:
        a, b = ord(m.group(3)), ord(m.group(4))
    if abs(b - a) >= MAX_ALTERNATIVES:
        return None  # left as text: a long sequence names nothing the floor looks for
    step = 1 if b >= a else -1
    values = range(a, b + step, step)
    return [str(v) if m.group(1) is not None else chr(v) for v in values]


@dataclass
class Shell:
    """What the floor knows of a shell's state at one point of a line: variables (each with the
    values it may hold), positional parameters and the working directory."""

    variables: dict[str, list[str]] = field(default_factory=dict)
    positional: list[str] | None = None  # $0, $1, ...; None when unknown
    cwd: str | None = None  # an absolute path (HOME-marked allowed) or None when unknown
    # Symbolic links the line made to a dangerous directory (`ln -s / x`): link path -> target
    links: dict[str, str] = field(default_factory=dict)

    def copy(self) -> Shell:
        return Shell({k: list(v) for k, v in self.variables.items()}, list(self.positional) if self.positional is not None else None, self.cwd, dict(self.links))

    def assign(self, name: str, values: list[str]) -> None:
        """Record that `name` may hold `values`, besides what it may already hold."""
        merged = list(dict.fromkeys(self.variables.get(name, []) + values))
        if len(merged) > MAX_ALTERNATIVES:
            raise ShellParseError(f"variable {name} may hold more than {MAX_ALTERNATIVES} values")
        self.variables[name] = merged

    def lookup(self, name: str) -> list[str]:
        if name.isdigit():
            if self.positional is not None and int(name) < len(self.positional):
                return [self.positional[int(name)]]
            return [UNKNOWN] if self.positional is None else [""]
        if name in ("@", "*"):
            return [" ".join(self.positional[1:])] if self.positional is not None else [UNKNOWN]
        known = self.variables.get(name)
        if name == "IFS" and known is None:
            return [DEFAULT_IFS]  # bash sets IFS at start-up; it never takes it from the environment
        if name == "HOME":
            return [HOME] + (known or [])
        if name == "PWD" and self.cwd is not None:
            return [self.cwd] + (known or [])
        return known if known is not None else [UNKNOWN]


# One expansion result: alternatives, each a list of fields (an unquoted `$x` may split into many).
_Alts = list[list[str]]


class Expander:
    """Expands words of one parsed line against a Shell state, bounded by a Budget."""

    def __init__(self, parsed: Parsed, budget: Budget) -> None:
        self.parsed = parsed
        self.budget = budget
        # Shell code bash would run while expanding: the command substitutions in values given to
        # prompt expansion (`${x@P}`) or named through indirection with a subscript (`${!x}`).
        self.code: list[str] = []

    def argv(self, nodes: list[Node], shell: Shell) -> list[tuple[str, Node | None]]:
        """Each node's expanded words, with the node each came from."""
        out: list[tuple[str, Node | None]] = []
        i = 0
        while i < len(nodes):
            j = i + 1
            while j < len(nodes) and nodes[j].start_byte == nodes[j - 1].end_byte:
                j += 1
            if j == i + 1:
                out.extend((w, nodes[i]) for w in self.word(nodes[i], shell))
            else:
                out.extend((w, nodes[i]) for w in self._glued(nodes[i:j], shell))
            i = j
        return out

    def _glued(self, nodes: list[Node], shell: Shell) -> list[str]:
        """One shell word the grammar split into adjacent nodes. In `rm$IFS-rf$IFS/` it ends the
        first node at a bare `$` and starts the next with `IFS/`: that `$` expands the name."""
        self.budget.spend(len(nodes))
        alts: _Alts = [[""]]
        for k, node in enumerate(nodes):
            nxt = nodes[k + 1] if k + 1 < len(nodes) else None
            children = node.children
            dollar = (node.type == "concatenation" and children and not children[-1].is_named and children[-1].type == "$"
                      and nxt is not None and nxt.type == "word")
            if dollar:
                for i, child in enumerate(children[:-1]):
                    alts = _concat(alts, self._expand(child, shell, True, k == 0 and i == 0, 0))
                alts = _concat(alts, [["$"]])  # replaced below when the next node names a variable
            elif k > 0 and nodes[k - 1].type == "concatenation" and nodes[k - 1].children and nodes[k - 1].children[-1].type == "$" and node.type == "word":
                text = self.text(node)
                name = re.match(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]", text)
                if name is None:
                    alts = _concat(alts, [[_escape(text)]])
                    continue
                alts = [a[:-1] + [a[-1][:-1]] for a in alts]  # drop the `$` placeholder
                alts = _concat(alts, _values(shell.lookup(name.group(0)), True, _ifs(shell)))
                alts = _concat(alts, [[_escape(text[name.end():])]])
            else:
                alts = _concat(alts, self._expand(node, shell, True, k == 0, 0))
        words = [w for fields in alts for f in fields for w in _braced(f)]
        words = list(dict.fromkeys(unescape(w) for w in words if w))
        if len(words) > MAX_ALTERNATIVES:
            raise ShellParseError(f"a word expands to more than {MAX_ALTERNATIVES} words")
        return words

    def word(self, node: Node, shell: Shell) -> list[str]:
        """The words one source word may become: every alternative's fields, brace-expanded and
        unescaped, markers kept. An unquoted expansion that is empty yields no word."""
        self.budget.spend()
        alts = self._expand(node, shell, True, True, 0)
        words: list[str] = []
        for fields in alts:
            for f in fields:
                for w in _braced(f):
                    words.append(unescape(w))
        if _splits(node):
            words = [w for w in words if w]
        words = list(dict.fromkeys(words))
        if len(words) > MAX_ALTERNATIVES:
            raise ShellParseError(f"a word expands to more than {MAX_ALTERNATIVES} words")
        return words

    def alternatives(self, node: Node, shell: Shell) -> list[list[str]]:
        """The argv pieces one source word may become, one list per alternative value."""
        self.budget.spend()
        out: list[list[str]] = []
        for fields in self._expand(node, shell, True, True, 0):
            words = [unescape(w) for f in fields for w in _braced(f)]
            if _splits(node):
                words = [w for w in words if w]
            out.append(words)
        return [list(a) for a in dict.fromkeys(tuple(a) for a in out)][:MAX_ALTERNATIVES]

    def value(self, node: Node | None, shell: Shell) -> list[str]:
        """The values an assignment's right-hand side may give (no splitting, no brace expansion)."""
        if node is None:
            return [""]
        self.budget.spend()
        if node.type == "array":
            values: list[str] = []
            for element in node.named_children:
                values.extend(self.word(element, shell))
            return values or [""]
        alts = self._expand(node, shell, False, True, 0)
        return list(dict.fromkeys(unescape(" ".join(fields)) for fields in alts))

    def text(self, node: Node) -> str:
        return self.parsed.text(node)

    # -- internals

    def _expand(self, node: Node, shell: Shell, split: bool, at_start: bool, depth: int) -> _Alts:
        kind = node.type
        if kind not in _WORD_PARTS and kind != "expansion" and self.parsed.hides(node):
            return [[UNKNOWN]]  # the output of a command substitution the grammar left as text
        if kind == "word":
            text = self.text(node)
            if at_start and text.startswith("~"):
                slash = text.find("/")
                return [[HOME + (text[slash:] if slash >= 0 else "")]]
            return [[text]]
        if kind == "raw_string":
            return [[_escape(self.text(node)[1:-1])]]
        if kind == "ansi_c_string":
            return [[_escape(ansi_c(self.text(node)[2:-1]))]]
        if kind in ("string", "translated_string"):
            return self._string(node, shell, depth)
        if kind == "concatenation":
            result: _Alts = [[""]]
            for i, child in enumerate(node.children):
                result = _concat(result, self._expand(child, shell, split, at_start and i == 0, depth))
            return result
        if kind in ("simple_expansion", "expansion"):
            if self._all_positional(node, shell):
                assert shell.positional is not None
                return [[_escape(p) for p in shell.positional[1:]] or [""]]
            return _values(self._parameter(node, shell, depth), split, _ifs(shell) if split else "")
        if kind == "command_substitution":
            return _values(self._substitution(node, shell, depth), split, _ifs(shell) if split else "")
        if kind in ("number", "brace_expression"):
            return [[self.text(node)]]
        if kind in ("process_substitution", "arithmetic_expansion"):
            return [[UNKNOWN]]
        return [[_escape(self.text(node))]]

    def _string(self, node: Node, shell: Shell, depth: int) -> _Alts:
        result: _Alts = [[""]]
        start = node.start_byte + (2 if node.type == "translated_string" else 1)
        pos = start
        for child in node.children:
            if not child.is_named:
                continue
            if child.start_byte > pos:
                gap = self.parsed.source[pos:child.start_byte].decode("utf-8", "replace")
                result = _concat(result, [[_escape(_dq_unescape(gap))]])
            if child.type == "string_content" and self.parsed.hides(child):
                part: _Alts = [[UNKNOWN]]
            elif child.type == "string_content":
                part = [[_escape(_dq_unescape(self.text(child)))]]
            elif self._all_positional(child, shell):
                part = self._expand(child, shell, False, False, depth)  # "$@": one word per parameter
            else:
                part = [[" ".join(fields)] for fields in self._expand(child, shell, False, False, depth)]
            result = _concat(result, part)
            pos = child.end_byte
        end = node.end_byte - 1
        if end > pos:
            result = _concat(result, [[_escape(_dq_unescape(self.parsed.source[pos:end].decode("utf-8", "replace")))]])
        return result

    def _all_positional(self, node: Node, shell: Shell) -> bool:
        """`$@` or `${@}` with known positional parameters."""
        if shell.positional is None or node.type not in ("simple_expansion", "expansion"):
            return False
        named = node.named_children
        return len(named) == 1 and named[0].type == "special_variable_name" and self.text(named[0]) == "@"

    def _parameter(self, node: Node, shell: Shell, depth: int) -> list[str]:
        """The values `$x` / `${x...}` may have (unescaped text, markers kept)."""
        named = node.named_children
        if not named:
            return [UNKNOWN]
        target = named[0]
        if target.type == "subscript":
            name_node = target.child_by_field_name("name")
            name = self.text(name_node) if name_node is not None else ""
        elif target.type in ("variable_name", "special_variable_name"):
            name = self.text(target)
        else:
            return [UNKNOWN]
        if node.type == "simple_expansion":
            return shell.lookup(name)
        # ${...}: `#` or `!` before the name (length, indirection), else the operator after it.
        before = [c.type for c in node.children if not c.is_named and c.start_byte < target.start_byte]
        after = [c.type for c in node.children if not c.is_named and c.start_byte > target.start_byte]
        if "!" in before:
            if target.type == "subscript" or any(t in ("*", "@") for t in after):
                return [UNKNOWN]  # ${!a[@]} keys, ${!prefix*} names
            return self._indirect(name, shell)
        if "#" in before:
            return [UNKNOWN]
        operator = next((t for t in after if t not in ("}", "[", "]")), "")
        values = shell.lookup(name)
        if name == "IFS" and "IFS" not in shell.variables and operator not in ("", "@", "%", "%%", "#", "##", ":?", "?", ":-", "-", ":=", "=", ":+", "+"):
            return [" "]  # a part of the default IFS (`${IFS:0:1}`) is a blank
        rest = named[1:]
        if operator == "@":
            return self._transform(after[after.index("@") + 1] if after.index("@") + 1 < len(after) else "", values)
        if operator in (":-", "-", ":=", "=", ":+", "+"):
            default: list[str] = []
            for alt in (self._expand(rest[0], shell, False, True, depth + 1) if rest else [[""]]):
                default.append(unescape(" ".join(alt)))
            alternates = [""] if operator in (":+", "+") else values
            return list(dict.fromkeys(default + alternates))
        if operator in ("%", "%%", "#", "##", ":?", "?", ""):
            return values  # suffix/prefix removal is not applied: the unreduced value is kept
        return [UNKNOWN]

    def _indirect(self, name: str, shell: Shell) -> list[str]:
        """`${!x}`: the values of the variables x's values name."""
        values: list[str] = []
        for value in shell.lookup(name):
            values.extend(self.indirect(value, shell))
        return list(dict.fromkeys(values)) or [""]

    def indirect(self, value: str, shell: Shell) -> list[str]:
        """The values of the variable `value` names (`${!x}` where x holds it, a `declare -n`
        target). A value the line does not show may name anything; a subscript in one is
        evaluated, running its command substitutions."""
        if any(m in value for m in MARKERS):
            return [ANYTHING]
        ref = _REFERENCE.fullmatch(value)
        if ref is None:
            return []  # bash refuses an invalid name: nothing is expanded
        if ref.group(2):
            self.code.extend(substitution_texts(ref.group(2)))
            return [UNKNOWN]
        return shell.lookup(ref.group(1))

    def _transform(self, letter: str, values: list[str]) -> list[str]:
        """`${x@P}` (prompt expansion: runs the value's command substitutions), `${x@E}` (escapes),
        `${x@A}`, `${x@Q}`...: a value the line does not show may become anything under P, E, A."""
        if letter in ("P", "E", "A") and any(m in v for v in values for m in MARKERS):
            return [ANYTHING]
        if letter == "P":
            for v in values:
                self.code.extend(substitution_texts(v))
            return [v if not any(c in v for c in "\\$`") else UNKNOWN for v in values]
        if letter == "E":
            return [ansi_c(v) for v in values]
        return [UNKNOWN]

    def _substitution(self, node: Node, shell: Shell, depth: int) -> list[str]:
        """`$(echo /)`, `$(printf %s ~)`, `$(pwd)`: the output when it is plain; else UNKNOWN."""
        if depth >= MAX_EXPANSION_DEPTH:
            return [UNKNOWN]
        inner = [c for c in node.named_children if c.type != "comment"]
        if len(inner) != 1 or inner[0].type != "command":
            return [UNKNOWN]
        cmd = _simple(inner[0], ())
        if cmd.assigns or not cmd.words:
            return [UNKNOWN]
        name = self.text(cmd.words[0])
        if name not in ("echo", "printf", "pwd", "realpath", "readlink"):
            return [UNKNOWN]
        if name == "pwd":
            return [shell.cwd] if shell.cwd is not None else [UNKNOWN]
        args: list[str] = []
        for arg in cmd.words[1:]:
            self.budget.spend()
            alts = self._expand(arg, shell, True, True, depth + 1)
            args.extend(unescape(w) for fields in alts for f in fields for w in _braced(f))
        if name in ("echo", "printf"):
            return [printed(name, args)]
        return [" ".join([a for a in args if not a.startswith("-")][:1])]


_REFERENCE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(\[.*\])?", re.DOTALL)
_PRINTF = re.compile(r"%%|%[-+ #0-9.]*[a-zA-Z]")


def printed(name: str, words: list[str]) -> str:
    """What echo or printf with these arguments prints, near enough: escapes decoded the way
    `echo -e` and printf do; printf's arguments follow its format (`printf %s /` prints `/`)."""
    if name == "printf":
        if not words:
            return ""
        fmt, args = ansi_c(words[0]), words[1:]
        out: list[str] = []
        for _ in range(MAX_ALTERNATIVES):  # the format is reused while arguments remain
            pieces: list[str] = []
            used = 0
            pos = 0
            for m in _PRINTF.finditer(fmt):
                pieces.append(fmt[pos:m.start()])
                pos = m.end()
                if m.group(0) == "%%":
                    pieces.append("%")
                    continue
                pieces.append(args[used] if used < len(args) else "")
                used += 1
            pieces.append(fmt[pos:])
            out.append("".join(pieces))
            args = args[used:]
            if not args or not used:
                break
        return "".join(out)
    escapes = False
    while words and re.fullmatch(r"-[neE]+", words[0]):
        escapes = escapes or "e" in words[0]
        words = words[1:]
    text = " ".join(words)
    return ansi_c(text) if escapes else text


def _values(values: list[str], split: bool, ifs: str = "") -> _Alts:
    """Expansion values as alternatives: split on blanks when unquoted (and, when the line sets
    IFS, also on its characters), escaped for the pattern form."""
    alts: _Alts = []
    separators = re.compile("[" + re.escape(ifs) + r"\s]+") if ifs else None
    for v in values:
        if len(v) > MAX_FIELD:
            raise ShellParseError(f"an expansion is longer than {MAX_FIELD} characters")
        if split:
            parts = v.split()
            alts.append(_fields(v, parts))
            if separators is not None:
                other = [p for p in separators.split(v) if p]
                if other != parts:
                    alts.append([_escape(p) for p in other] or [""])
        else:
            alts.append([_escape(v)])
    return alts


def _fields(value: str, parts: list[str]) -> list[str]:
    """The fields of an unquoted value split on blanks, with an empty field where a leading or
    trailing blank ends the text before or after it (`rm${IFS}-rf` is `rm` and `-rf`)."""
    if not value:
        return [""]
    if not parts:
        return ["", ""]
    fields = [_escape(p) for p in parts]
    if value[0].isspace():
        fields.insert(0, "")
    if value[-1].isspace():
        fields.append("")
    return fields


def _splits(node: Node) -> bool:
    """Whether the word holds an unquoted expansion, whose empty fields bash removes."""
    return node.type in _EXPANSIONS or (node.type == "concatenation" and any(c.type in _EXPANSIONS for c in node.children))


def _ifs(shell: Shell) -> str:
    """The characters the line may have put in IFS (besides blanks), or "" when it sets none."""
    values = shell.variables.get("IFS")
    if not values:
        return ""
    return "".join(sorted({c for v in values for c in v if c not in MARKERS and not c.isspace()}))[:64]


def _concat(left: _Alts, right: _Alts) -> _Alts:
    if len(left) * len(right) > MAX_ALTERNATIVES:
        raise ShellParseError(f"a word may stand for more than {MAX_ALTERNATIVES} values")
    out: dict[tuple[str, ...], list[str]] = {}
    for a in left:
        for b in right:
            joined = a[:-1] + [a[-1] + b[0]] + b[1:]
            if len(joined[-1]) > MAX_FIELD or len(joined) > MAX_ALTERNATIVES * 4:
                raise ShellParseError(f"a word expands to more than {MAX_FIELD} characters")
            out.setdefault(tuple(joined), joined)
    return list(out.values())
