"""What a shell command Claude ran was for, read from its text: a test run, a build, a commit, a
formatter, a routine look around, or something else.

The offline compressor words an observation and a summary by this kind: a routine command
(``git status``, ``ls``, ``cd``, ``which``, a version check, a formatter) says little about the
work, so all routine commands of one sort get one title, which the injected context folds into one
line; a test run or a build says whether it passed and why not.

A command is split into its simple commands (at ``&&``, ``||``, ``;``, ``|`` and line breaks,
quoted text set aside first); prefixes that do not change what runs (``sudo``, ``time``,
``VAR=value``, ``timeout 60``) are skipped. A command is routine only when every part of it is,
so ``cd build && make`` is a build and ``git log | head`` a look at the history. Pure string work,
a few microseconds a command: it runs for every tool use of every batch.
"""

from __future__ import annotations

import enum
import re

import msgspec


class Kind(enum.Enum):
    TEST = "test"
    BUILD = "build"
    COMMIT = "commit"
    ROUTINE = "routine"
    OTHER = "other"


class Routine(enum.Enum):
    """The sorts of routine command; the value is the one title all commands of the sort share."""

    GIT = "Checked the git state"
    FILES = "Looked around the files"
    ENVIRONMENT = "Checked the environment"
    FORMAT = "Formatted the code"


class CommandKind(msgspec.Struct, frozen=True):
    kind: Kind
    routine: Routine | None = None  # the sort, for a routine command
    message: str = ""  # a commit's message


_QUOTED = re.compile(r"'[^']*'|\"(?:\\.|[^\"\\])*\"")
# A here-document's body is data, not commands (`cat > notes.md <<EOF … EOF`).
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?(.*?)\n.*?\n\s*\1\b", re.S)
_SEPARATOR = re.compile(r"&&|\|\||;|\n|\|(?!\|)")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Writing a file through a redirection (not `2>&1`, not to /dev/null) makes a command more than a look.
_WRITES = re.compile(r"(?:^|[^0-9&>])>>?\s*(?!&|/dev/null)\S")
_COMMIT_MESSAGE = re.compile(r"""(?:^|\s)(?:-m|--message)(?:=|\s+)(?:'([^']*)'|"((?:\\.|[^"\\])*)"|(\S+))""")
_HEREDOC_MESSAGE = re.compile(r"<<\s*'?(\w+)'?\s*\n(.*?)\n\s*\1\b", re.S)

_PREFIXES = frozenset({"sudo", "time", "nice", "nohup", "command", "exec", "env", "builtin", "stdbuf"})
_WITH_ARGUMENT = frozenset({"timeout", "-n", "-u"})  # prefixes (or their options) followed by one value

_TEST = re.compile(
    r"\b(?:pytest|py\.test|unittest|nose2?|tox|nox|jest|vitest|mocha|rspec|phpunit|ctest|playwright test"
    r"|go test|cargo (?:test|nextest)|(?:npm|pnpm|yarn|bun)(?: run)? test|deno test|make (?:test|check)"
    r"|mix test|swift test|dotnet test|gradlew? test|mvn test|bazel test|just test|mise run test)\b")
_TEST_EXECUTABLE = re.compile(r"^\.{0,2}/\S*test")  # ./tests/vsla_tests, ./build/test_parser
_BUILD = re.compile(
    r"\b(?:make|cmake|ninja|meson|cargo (?:build|check)|swift build|mix compile|go build|tsc|gcc|g\+\+|clang"
    r"|nvcc|javac|mvn (?:compile|package|install)|gradlew? build|(?:npm|pnpm|yarn|bun)(?: run)? build"
    r"|pdflatex|xelatex|lualatex|latexmk|docker build|bazel build|dotnet build|zig build|just build"
    r"|mise run build)\b")
_FORMATTERS = frozenset({"fmt", "format", "prettier", "black", "isort", "autopep8", "yapf", "gofmt", "rustfmt",
                         "clang-format", "swiftformat", "dprint", "autoflake", "shfmt", "stylua", "goimports"})

_GIT_READS = frozenset({"status", "log", "diff", "show", "rev-parse", "ls-files", "blame", "describe", "shortlog",
                        "reflog", "grep", "whatchanged", "ls-remote", "ls-tree", "cat-file", "rev-list"})
_GH_READS = frozenset({("auth", "status"), ("pr", "view"), ("pr", "list"), ("pr", "status"), ("pr", "checks"),
                        ("issue", "view"), ("issue", "list"), ("run", "list"), ("run", "view"), ("repo", "view")})
_GH_WRITE_FLAGS = frozenset({"-X", "--method", "-f", "-F", "--field", "--raw-field"})
_LISTING = frozenset({"ls", "ll", "la", "dir", "tree", "find", "fd", "du", "df", "pwd", "cd", "pushd", "popd",
                      "stat", "file", "realpath", "readlink", "basename", "dirname", "cat", "head", "tail", "less",
                      "more", "wc", "bat", "nl", "grep", "egrep", "rg", "ag", "ack", "locate", "md5sum",
                      "sha256sum", "xxd", "hexdump", "od", "diff", "cmp"})
_ENVIRONMENT = frozenset({"which", "whereis", "type", "uname", "whoami", "id", "hostname", "date", "printenv",
                          "echo", "printf", "true", "false", "sleep", "clear", "history", "ps", "pgrep", "top",
                          "htop", "free", "uptime", "nproc", "lsb_release", "lscpu", "nvidia-smi", "jobs",
                          "groups", "locale", "ulimit", "arch", "sw_vers"})
# After a pipe these only shape what the command before printed.
_FILTERS = frozenset({"head", "tail", "grep", "egrep", "rg", "sort", "uniq", "wc", "cut", "awk", "sed", "jq", "tr",
                      "column", "less", "more", "cat", "tee", "fold", "fmt", "nl", "xargs", "yq", "bat"})
_LOOKS = _LISTING | _ENVIRONMENT | _FILTERS | {"git", "gh"}
_VERSION_FLAGS = frozenset({"--version", "-V", "version", "--help", "-h", "help"})


def _words(part: str) -> list[str]:
    """The words of one simple command after its prefixes (``sudo``, ``time``, ``A=b``, ``timeout 5``)."""
    words = part.split()
    while words:
        head = words[0]
        if _ASSIGNMENT.match(head) or head in _PREFIXES:
            words = words[1:]
        elif head == "timeout" and len(words) > 1:
            words = words[2:]
        elif head in _WITH_ARGUMENT and len(words) > 1 and words[1].lstrip("-").isdigit():
            words = words[2:]
        elif head.startswith("-") and head.lstrip("-").isdigit():  # nice -10
            words = words[1:]
        else:
            break
    return words


def _routine(words: list[str], part: str) -> Routine | None:
    """The sort of routine command ``words`` is, or ``None``."""
    name = words[0].rsplit("/", 1)[-1]
    if any(word in _FORMATTERS for word in words if not word.startswith("-")):
        return Routine.FORMAT
    if _WRITES.search(part):
        return None
    arguments = [word for word in words[1:] if not word.startswith("-")]
    if name == "git":
        sub = arguments[0] if arguments else ""
        if sub in _GIT_READS:
            return Routine.GIT
        if sub == "branch" and len(arguments) == 1 or sub in ("remote", "stash", "tag") and len(arguments) <= 2 \
                and (len(arguments) == 1 or arguments[1] in ("list", "show", "-v")):
            return Routine.GIT
        if sub == "config" and (len(arguments) <= 2 or any(w in ("--get", "--list", "-l") for w in words)):
            return Routine.GIT
        return None
    if name == "gh":
        pair = tuple(arguments[:2])
        if pair in _GH_READS or pair[:1] == ("api",) and not any(w in _GH_WRITE_FLAGS for w in words):
            return Routine.GIT
        return None
    if name in _LISTING:
        if name == "find" and any(w in ("-delete", "-exec", "-execdir") for w in words):
            return None
        return Routine.FILES
    if name in _ENVIRONMENT or len(words) >= 2 and words[1] in _VERSION_FLAGS and len(words) <= 3:
        return Routine.ENVIRONMENT
    if name == "command" and words[1:2] == ["-v"]:
        return Routine.ENVIRONMENT
    return None


def classify(command: str) -> CommandKind:
    """What ``command`` was run for (see the module docstring)."""
    bare = _QUOTED.sub("Q", _HEREDOC.sub("<<H", command) if "<<" in command else command)
    words_of = [(words, part) for part in _SEPARATOR.split(bare) if (words := _words(part))]
    names = [words[0].rsplit("/", 1)[-1] for words, _ in words_of]
    # A test word inside a look (`ls tests/`, `grep -r pytest`, `git log -- tests`) is no test run.
    if any(name not in _LOOKS and (_TEST.search(" ".join(words)) or _TEST_EXECUTABLE.match(words[0]))
           for name, (words, _) in zip(names, words_of)):
        return CommandKind(Kind.TEST)
    if "git" in names and any(words[1:2] == ["commit"] for words, _ in words_of if words[0] == "git"):
        return CommandKind(Kind.COMMIT, message=_commit_message(command))
    sorts: list[Routine] = []
    for position, (words, part) in enumerate(words_of):
        if position and names[position] in _FILTERS and names[position - 1] not in ("cd", "pushd"):
            continue  # `… | head -5`
        sort = _routine(words, part)
        if sort is None:
            return CommandKind(Kind.BUILD if _BUILD.search(bare) else Kind.OTHER)
        if names[position] not in ("cd", "pushd", "popd"):
            sorts.append(sort)
    if not words_of:
        return CommandKind(Kind.OTHER)
    # `cd x && git status` is a look at git; `cd x` alone one at the files.
    return CommandKind(Kind.ROUTINE, routine=sorts[0] if sorts else Routine.FILES)


def _commit_message(command: str) -> str:
    """The first line of a ``git commit`` message given inline (``-m "…"``) or by a here-document."""
    if (match := _HEREDOC_MESSAGE.search(command)) is not None:
        text = match.group(2)
    elif (match := _COMMIT_MESSAGE.search(command)) is not None:
        text = next(group for group in match.groups() if group is not None)
    else:
        return ""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
