"""What README.md, BENCHMARKS.md and docs/ name exists: repository paths, links and their anchors, and commands.

- **Paths**: every repository path in inline code, a link or a shell block (its first folder or file is one of the
  repository's: ``gateway/cache.py``, ``docs/realtime.md``), and every bare one with a file suffix in the prose
  (``docs/deployment.md``), is a file or folder of the repository (tracked, or new and not ignored). ``<name>``,
  ``{a,b}`` and ``*`` are placeholders: some file must match.
- **Links**: a relative link's target exists, and its ``#anchor`` is a heading (GitHub's slug) of the target.
- **``chattts-gateway`` commands**, in inline code and shell blocks, are checked against the real parser
  (``gateway.cli.build_parser``): each subcommand exists and each option belongs to it; a command in a shell block
  (meant to run as written) must parse completely. ``[--config FILE]``, ``NAME``, ``tiny|full`` are placeholders.
- **Benchmark commands** (``python bench/X.py``, ``python -m bench.X``): the script exists, each option is one its
  parser declares (read from its source: the benchmarks' imports need the ``bench`` extra), and ``bench/run.py``'s
  benchmark names are its ``BENCHMARKS``.

Running the examples themselves is ``tests/e2e/test_docs_examples.py``'s job.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fnmatch
import io
import re
import shlex
import subprocess
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath

import pytest

from gateway.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ["README.md", "BENCHMARKS.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]

_FENCED = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```", re.MULTILINE | re.DOTALL)
_SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(?P<code>(?:(?!\n\s*\n).)+?)(?<!`)\1(?!`)", re.DOTALL)  # within a paragraph
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$", re.MULTILINE)
_HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"(?P<id>[^\"]+)\"", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"<[^<>/]*>")
_BARE_PATH = re.compile(r"(?<![\w./`-])(?P<path>[A-Za-z.][\w.-]*/[\w./<>*-]*\.\w+)(?![\w/`])")
_REDIRECTION = re.compile(r"(?<!\S)\d*(?:>>|>&|<&|&>|>|<)\s*\S+")
_ENV_ASSIGNMENT = re.compile(r"^\w+=")
_SHELL_OPERATORS = {"|", "||", "&&", ";", "&", "(", ")"}
_BENCH_SCRIPT = re.compile(r"^(?:bench/(?P<script>[\w/]+)\.py|-m bench\.(?P<module>\w+))$")


@dataclass(frozen=True)
class Mention:
    """Something a document names, and where."""

    document: str
    line: int
    text: str

    def where(self) -> str:
        return f"{self.document}:{self.line}"


@cache
def repository_files() -> frozenset[str]:
    """The repository's files: tracked, or new and not ignored (what a commit would hold)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return frozenset(name for name in listed.split("\0") if name and (ROOT / name).exists())


@cache
def repository_folders() -> frozenset[str]:
    return frozenset(str(parent) for name in repository_files() for parent in PurePosixPath(name).parents) - {"."}


@cache
def top_level_names() -> frozenset[str]:
    return frozenset(name.split("/", 1)[0] for name in repository_files())


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def prose_and_blocks(text: str) -> tuple[str, list[tuple[str, str, int]]]:
    """The text with fenced blocks blanked out (line numbers kept), and each block: language, body, first line."""
    blocks = [(m["lang"], m["body"], line_of(text, m.start()) + 1) for m in _FENCED.finditer(text)]
    prose = _FENCED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return prose, blocks


def code_spans(document: str) -> list[Mention]:
    text = (ROOT / document).read_text()
    prose, _ = prose_and_blocks(text)
    return [
        Mention(document, line_of(prose, m.start()), " ".join(m["code"].split())) for m in _CODE_SPAN.finditer(prose)
    ]


def shell_commands(document: str) -> list[Mention]:
    """Each command line of the document's shell blocks, continuation lines joined, comments and redirections off."""
    text = (ROOT / document).read_text()
    _, blocks = prose_and_blocks(text)
    commands = []
    for lang, body, first_line in blocks:
        if lang not in _SHELL_LANGUAGES:
            continue
        line = first_line
        for logical in re.split(r"(?<!\\)\n", body):
            joined = logical.replace("\\\n", " ")
            commands.append(Mention(document, line, _REDIRECTION.sub(" ", joined)))
            line += logical.count("\n") + 1
    return commands


def words_of(command: str) -> list[list[str]]:
    """A command line's simple commands, as words without the leading variable assignments."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: not a command line
        return []
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token in _SHELL_OPERATORS:
            commands.append([])
        elif commands[-1] or not _ENV_ASSIGNMENT.match(token):
            commands[-1].append(token)
    return [words for words in commands if words]


# Paths.


def expand_braces(pattern: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [expanded for part in match[1].split(",") for expanded in expand_braces(head + part + tail)]


def path_exists(path: str) -> bool:
    path = path.rstrip("/")
    patterns = expand_braces(_PLACEHOLDER.sub("*", path))
    names = repository_files() | repository_folders()
    return all(
        any(fnmatch.fnmatchcase(name, pattern) for name in names) if "*" in pattern else pattern in names
        for pattern in patterns
    )


def repository_path(word: str) -> str | None:
    """``word`` as a path of the repository, or None when it does not look like one (``/tmp/x``, ``asset/``)."""
    word = re.sub(r":\d*$", "", word.strip("()[],;'\""))  # `gateway/settings.py: Settings`, `app.py:42`
    word = word.removeprefix("./")
    first = word.split("/", 1)[0]
    if "/" not in word or first not in top_level_names() or "://" in word:
        return None
    return word


def named_paths(document: str) -> list[Mention]:
    text = (ROOT / document).read_text()
    prose, _ = prose_and_blocks(text)
    mentions = []
    for span in code_spans(document):
        mentions += [Mention(document, span.line, word) for word in span.text.split()]
    for command in shell_commands(document):
        mentions += [Mention(document, command.line, w) for words in words_of(command.text) for w in words]
    prose_without_code = _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), _LINK.sub(" ", prose))
    mentions += [
        Mention(document, line_of(prose, m.start()), m["path"]) for m in _BARE_PATH.finditer(prose_without_code)
    ]
    return [Mention(m.document, m.line, path) for m in mentions if (path := repository_path(m.text))]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_repository_path_a_document_names_exists(document: str) -> None:
    missing = [
        f"{m.where()}: `{m.text}` is not in the repository" for m in named_paths(document) if not path_exists(m.text)
    ]
    assert not missing, "\n".join(missing)


# Links.


def github_slug(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    title = re.sub(r"<[^>]+>", "", title)
    title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link's text stays
    kept = "".join(c for c in title.lower() if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


@cache
def anchors(document: str) -> frozenset[str]:
    text = (ROOT / document).read_text()
    prose, _ = prose_and_blocks(text)
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.finditer(prose):
        slug = github_slug(heading["title"])
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return frozenset(found | {m["id"] for m in _HTML_ANCHOR.finditer(text)})


def link_problem(document: str, target: str) -> str | None:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
        return None
    path, _, anchor = target.partition("#")
    resolved = (ROOT / document).parent / path if path else ROOT / document
    relative = resolved.resolve().relative_to(ROOT).as_posix() if resolved.resolve().is_relative_to(ROOT) else None
    if relative is None or (not path_exists(relative) and relative != "."):
        return f"links to `{target}`, which is not in the repository"
    if anchor and relative.endswith(".md") and anchor not in anchors(relative):
        return f"links to `{target}`, but {relative} has no heading with the anchor #{anchor}"
    return None


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_link_of_a_document_leads_somewhere(document: str) -> None:
    text = (ROOT / document).read_text()
    prose, _ = prose_and_blocks(text)
    broken = [
        f"{document}:{line_of(prose, m.start())}: {problem}"
        for m in _LINK.finditer(prose)
        if (problem := link_problem(document, m["target"]))
    ]
    assert not broken, "\n".join(broken)


# chattts-gateway commands.


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public way to walk them
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def is_placeholder(word: str) -> bool:
    return bool(re.search(r"[\[\]|]|\.\.\.", word)) or (word.isupper() and word.isalpha())


def cli_problem(words: list[str], *, complete: bool) -> str | None:
    """What is wrong with ``chattts-gateway WORDS``, or None; ``complete``: it must parse as written."""
    parser = build_parser()
    command = ["chattts-gateway"]
    rest = list(words)
    while (choices := subcommands(parser)) and rest and not rest[0].startswith("-"):
        if rest[0] not in choices:
            return f"`{' '.join(command)}` has no command `{rest[0]}` (it has {', '.join(sorted(choices))})"
        command.append(rest.pop(0))
        parser = choices[command[-1]]
    options = {option for action in parser._actions for option in action.option_strings}
    for word in rest:
        option = word.strip("[]").split("=", 1)[0]
        if option.startswith("-") and option not in {"-", "--"} and option not in options:
            return f"`{' '.join(command)}` has no option `{option}` (it has {', '.join(sorted(options))})"
    if complete and not any(is_placeholder(word) for word in words):
        errors = io.StringIO()
        with contextlib.redirect_stderr(errors), contextlib.suppress(SystemExit):
            build_parser().parse_args(words)
            return None
        return f"`chattts-gateway {shlex.join(words)}` does not parse: {errors.getvalue().strip().splitlines()[-1]}"
    return None


def cli_invocations(document: str) -> list[tuple[Mention, list[str], bool]]:
    """Each ``chattts-gateway`` command the document names: where, its words after ``chattts-gateway``, and whether it
    runs."""
    found = []
    for command in shell_commands(document):
        for words in words_of(command.text):
            if words[0] == "chattts-gateway":
                found.append((command, words[1:], True))
    for span in code_spans(document):
        words = [w for w in span.text.split() if not _ENV_ASSIGNMENT.match(w)]
        if len(words) > 1 and words[0] == "chattts-gateway":
            with contextlib.suppress(ValueError):
                found.append((span, shlex.split(" ".join(words[1:])), False))
    return found


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_gateway_command_a_document_names_exists(document: str) -> None:
    wrong = [
        f"{mention.where()}: {problem}"
        for mention, words, runs in cli_invocations(document)
        if (problem := cli_problem(words, complete=runs))
    ]
    assert not wrong, "\n".join(wrong)


# Benchmark commands.


@cache
def declared_arguments(script: str) -> tuple[frozenset[str], frozenset[str] | None]:
    """The option strings ``bench/SCRIPT.py`` passes to ``add_argument``, and its ``BENCHMARKS`` names if any."""
    tree = ast.parse((ROOT / "bench" / f"{script}.py").read_text())
    options = {
        argument.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
        for argument in node.args
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str) and argument.value.startswith("-")
    }
    names = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "BENCHMARKS" for t in node.targets):
            assert isinstance(node.value, ast.Dict)
            names = frozenset(
                k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
            )
    return frozenset(options | {"-h", "--help"}), names


def bench_script(words: list[str]) -> tuple[str, list[str]] | None:
    """The benchmark a command runs (``run``, ``chattts_batching``) and its arguments, or None for another command."""
    if words[0].endswith(("python", "python3")):  # else the script itself: `bench/run.py overhead`
        words = words[1:]
    if len(words) > 1 and words[0] == "-m":
        words = [f"-m {words[1]}", *words[2:]]
    match = _BENCH_SCRIPT.match(words[0]) if words else None
    return (match["script"] or match["module"], words[1:]) if match else None


def bench_invocations(document: str) -> list[tuple[Mention, str, list[str]]]:
    """Each benchmark command: where, the script, the words after it."""
    return [
        (mention, *script)
        for mention in shell_commands(document) + code_spans(document)
        for words in words_of(mention.text)
        if (script := bench_script(words))
    ]


def bench_problem(script: str, words: list[str]) -> str | None:
    if f"bench/{script}.py" not in repository_files():
        return f"`bench/{script}.py` is not in the repository"
    options, names = declared_arguments(script)
    for word in words:
        option = word.split("=", 1)[0]
        if option.startswith("-") and option not in options and not re.fullmatch(r"-[\d.]+", option):
            return f"`bench/{script}.py` declares no option `{option}`"
    if names is not None:
        positional = words[: next((i for i, w in enumerate(words) if w.startswith("-")), len(words))]
        unknown = [name for name in positional if name not in names]
        if unknown:
            return f"`bench/{script}.py` has no benchmark {unknown} (it has {', '.join(sorted(names))})"
    return None


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_benchmark_command_a_document_names_exists(document: str) -> None:
    wrong = [
        f"{mention.where()}: {problem}"
        for mention, script, words in bench_invocations(document)
        if (problem := bench_problem(script, words))
    ]
    assert not wrong, "\n".join(wrong)


# The checks themselves.


def test_the_checks_see_what_is_wrong() -> None:
    assert not path_exists("gateway/cache.py")
    assert path_exists("gateway/speech/cache.py")
    assert path_exists("bench/results/<name>.json")
    assert path_exists("engines/chattts/")
    assert repository_path("/tmp/chattts-full") is None
    assert repository_path("asset/gpt/config.json") is None
    assert cli_problem(["keys", "hash"], complete=False) is not None
    assert cli_problem(["keys", "create", "--tenant", "NAME", "[--config", "FILE]"], complete=False) is None
    assert cli_problem(["serve", "--prot", "8001"], complete=False) is not None
    assert cli_problem(["assets", "generate", "--preset", "huge", "/tmp/x"], complete=True) is not None
    assert bench_script(["bench/run.py", "soak"]) == ("run", ["soak"])
    assert bench_script([".venv/bin/python", "-m", "bench.fairness", "--workers", "2"]) == (
        "fairness",
        ["--workers", "2"],
    )
    assert bench_script(["python", "-c", "print()"]) is None
    assert bench_problem("run", ["overhead", "--rounds", "6"]) is None
    assert bench_problem("run", ["overheads"]) is not None
    assert bench_problem("chattts_batching", ["--ceiling-threads", "2", "--tokenz", "128"]) is not None
    assert github_slug("`kind: openai` options") == "kind-openai-options"
    assert github_slug("Two tiers: gateways in front of engine nodes") == "two-tiers-gateways-in-front-of-engine-nodes"
    assert words_of("A=1 chattts-gateway serve --port 9000 | grep x  # comment") == [
        ["chattts-gateway", "serve", "--port", "9000"],
        ["grep", "x"],
    ]
