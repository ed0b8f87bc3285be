"""Shell completion: ``paddlectl completion bash|zsh|fish`` prints a script for the shell; the
script asks ``paddlectl __complete WORD...`` (the words typed after ``paddlectl``, the last
one being completed, maybe empty) for what may come next, as kubectl's and cobra's do.

``__complete`` prints one candidate a line, then a last line ``:files`` when the shell should
complete local file names instead (a package directory, a local ``cp`` source), else ``:``.
Subcommands and flags come from the parsers themselves; job names, registry names and PFS
paths from the portal, in the current datacenter of the config (or ``--config`` /
``--datacenter`` typed on the line); datacenter names from the config. Completion never
fails aloud: a portal that does not answer, or no config, completes nothing.
"""

from __future__ import annotations

import argparse
import itertools
import posixpath
from typing import TextIO

from paddlecloud_client.errors import PaddlectlError
from paddlecloud_client.pfspath import PFS_PREFIX
from paddlectl.args import CliParser
from paddlectl.commands import COMMANDS
from paddlectl.context import Context
from paddlectl.output import FORMATS

COMPLETE = "__complete"
FILES, NOTHING = ":files", ":"
SHELLS = ("bash", "zsh", "fish")

# What a command's positional argument is, by its metavar: how its values are found.
JOB_ARGS = {"JOB"}
PATH_ARGS = {"PATH", "SRC", "DEST"}
LOCAL_ARGS = {"PACKAGE"}
# ``get RESOURCE NAME`` / ``delete RESOURCE NAME``: the resources whose names are jobs'.
JOB_RESOURCES = {"jobs", "workers", "tasks", "checkpoints"}


def complete(words: list[str], stdout: TextIO) -> int:
    """Print the candidates for the last of ``words`` (see the module's docstring)."""
    *before, current = words or [""]
    try:
        candidates, then = _candidates(before, current)
    except (PaddlectlError, OSError, ValueError, KeyError, TypeError):
        candidates, then = [], NOTHING  # completion stays quiet: the command will say it
    stdout.write("".join(f"{c}\n" for c in candidates if c.startswith(current)) + then + "\n")
    return 0


def _candidates(before: list[str], current: str) -> tuple[list[str], str]:
    top = _global_options(before)
    name = next((w for w in top.words if not w.startswith("-")), None)
    if name is None or name not in COMMANDS or not COMMANDS[name].available:
        if current.startswith("-"):
            return _flags(_top_parser(), current), NOTHING
        value = _value_of(_top_parser(), before, top)
        if value is not None:
            return value
        return sorted(n for n, c in COMMANDS.items() if c.available), NOTHING
    parser = COMMANDS[name].parser()
    value = _value_of(parser, before, top)
    if value is not None:
        return value
    if current.startswith("-"):
        return _flags(parser, current), NOTHING
    given = _positionals(parser, top.words[top.words.index(name) + 1:])
    return _positional(name, parser, given, current, top)


class _Line:
    """The words typed, and the command's context as their global options make it (the
    config, the datacenter, its client: reached only when a value needs the portal)."""

    def __init__(self, words: list[str], config: str | None, datacenter: str | None):
        self.words = words
        self.context = Context(argparse.Namespace(config=config, datacenter=datacenter))


def _global_options(words: list[str]) -> _Line:
    config = datacenter = None
    for flag, value in itertools.pairwise(words):
        if flag in ("-config", "--config"):
            config = value
        elif flag in ("-datacenter", "--datacenter"):
            datacenter = value
    return _Line(words, config, datacenter)


def _top_parser() -> CliParser:
    from paddlectl.cli import top_parser

    return top_parser()


def _flags(parser: argparse.ArgumentParser, current: str) -> list[str]:
    """The parser's flags spelled as ``current`` starts them: ``--name`` for ``--``, else
    the seeds' ``-name`` (and one-letter ``-x``)."""
    double = current.startswith("--")
    return sorted({s for action in parser._actions if action.help is not argparse.SUPPRESS
                   for s in action.option_strings if s.startswith("--") == double})


def _value_of(parser: argparse.ArgumentParser, before: list[str],
              line: _Line) -> tuple[list[str], str] | None:
    """The values of the flag just typed, if the word being completed is its value."""
    if not before or not before[-1].startswith("-"):
        return None
    action = next((a for a in parser._actions if before[-1] in a.option_strings), None)
    if action is None or action.nargs == 0:
        return None
    if action.choices:
        return list(action.choices), NOTHING
    if action.dest == "output":
        return list(FORMATS), NOTHING
    if action.dest == "datacenter":
        return _datacenters(line), NOTHING
    return [], FILES  # a local path (a config file, an input directory, ...), or a value


def _positionals(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """The positional arguments among ``words`` (flags and their values left out)."""
    taking = {s for a in parser._actions if a.option_strings and a.nargs != 0
              for s in a.option_strings}
    given, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word.startswith("-") and word != "-":
            skip = word in taking
        else:
            given.append(word)
    return given


def _positional(name: str, parser: argparse.ArgumentParser, given: list[str], current: str,
                line: _Line) -> tuple[list[str], str]:
    """The values of the positional argument ``current`` is, after ``given``."""
    actions = [a for a in parser._actions if not a.option_strings]
    action, left = None, len(given)
    for each in actions:
        action = each
        if each.nargs in ("*", "+"):
            break
        if left == 0:
            break
        left -= 1
    else:
        return [], NOTHING  # every argument given
    if action is None:
        return [], NOTHING
    if action.choices:
        return list(action.choices), NOTHING
    if name == "help":
        return sorted(n for n, c in COMMANDS.items() if c.available), NOTHING
    if action.metavar == "RESOURCE":
        from paddlectl.commands.jobs import RESOURCES

        kinds = {"get": {r for r in RESOURCES.values()},
                 "delete": {"jobs", "registry", "sweeps"}}
        spelled = {"delete": {"jobs": "job", "sweeps": "sweep"}}.get(name, {})
        return sorted(spelled.get(r, r) for r in kinds.get(name, set())), NOTHING
    if action.metavar == "NAME" and name in ("get", "delete") and given:
        from paddlectl.commands.jobs import RESOURCES

        resource = RESOURCES.get(given[0])
        if resource in JOB_RESOURCES:
            return _jobs(line), NOTHING
        if resource == "registry":
            return [r["name"] for r in line.context.client.registry_list()], NOTHING
        if resource == "sweeps":
            return [s["name"] for s in line.context.client.sweep_list()], NOTHING
        return [], NOTHING
    if action.metavar == "ID" and name == "notify":
        return [str(s["id"]) for s in line.context.client.notify_list()], NOTHING
    if action.metavar == "NAME" and name == "config":
        return _datacenters(line), NOTHING
    if action.metavar in JOB_ARGS:
        return _jobs(line), NOTHING
    if action.metavar in PATH_ARGS:
        remote = current.startswith(PFS_PREFIX) or (COMMANDS[name].pfs and name != "cp")
        return (_pfs_paths(line, current), NOTHING) if remote else ([], FILES)
    if action.metavar in LOCAL_ARGS:
        return [], FILES
    return [], NOTHING


def _datacenters(line: _Line) -> list[str]:
    return [datacenter.name for datacenter in line.context.config.datacenters]


def _jobs(line: _Line) -> list[str]:
    return sorted(job["name"] for job in line.context.client.job_list())


def _pfs_paths(line: _Line, current: str) -> list[str]:
    """The PFS paths that continue ``current``: its directory's entries (directories end in
    ``/``); an empty word starts at the user's home."""
    if not current.startswith(PFS_PREFIX):
        return [line.context.home + "/"]
    directory = current if current.endswith("/") else posixpath.dirname(current) + "/"
    listing = line.context.client.pfs_list(directory.rstrip("/") or "/")
    return [directory + entry["name"] + ("/" if entry.get("type") == "dir" else "")
            for entry in listing.get("entries") or []]


# --- the shells' scripts ---------------------------------------------------------------------

BASH = r"""# paddlectl completion for bash: source <(paddlectl completion bash)
_paddlectl() {
    local cur="${COMP_WORDS[COMP_CWORD]}" out line files=0
    COMPREPLY=()
    out=$("${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null) || return
    while IFS= read -r line; do
        case "$line" in
            :files) files=1 ;;
            :) ;;
            *) COMPREPLY+=("$line") ;;
        esac
    done <<< "$out"
    if [ "$files" = 1 ]; then
        compopt -o default 2>/dev/null
        COMPREPLY=($(compgen -f -- "$cur"))
    elif [ "${#COMPREPLY[@]}" = 1 ] && [ "${COMPREPLY[0]: -1}" = / ]; then
        compopt -o nospace 2>/dev/null
    fi
}
complete -F _paddlectl paddlectl
"""

ZSH = r"""#compdef paddlectl
# paddlectl completion for zsh: source <(paddlectl completion zsh)
_paddlectl() {
    local -a found dirs
    local line files=0
    for line in "${(@f)$(${words[1]} __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}"; do
        case "$line" in
            :files) files=1 ;;
            :) ;;
            */) dirs+=("$line") ;;
            *) found+=("$line") ;;
        esac
    done
    if (( files )); then
        _files
        return
    fi
    (( ${#found} )) && compadd -Q -- "${found[@]}"
    (( ${#dirs} )) && compadd -Q -S '' -- "${dirs[@]}"
}
if [ "$funcstack[1]" = "_paddlectl" ]; then
    _paddlectl "$@"
else
    compdef _paddlectl paddlectl
fi
"""

FISH = r"""# paddlectl completion for fish: paddlectl completion fish | source
function __paddlectl_complete
    set -l words (commandline -opc) (commandline -ct)
    set -l found ($words[1] __complete $words[2..-1] 2>/dev/null)
    for line in $found
        switch $line
            case ':files'
                __fish_complete_path (commandline -ct)
            case ':'
            case '*'
                echo $line
        end
    end
end
complete -c paddlectl -f -a '(__paddlectl_complete)'
"""

SCRIPTS: dict[str, str] = {"bash": BASH, "zsh": ZSH, "fish": FISH}


def script(shell: str) -> str:
    return SCRIPTS[shell]
