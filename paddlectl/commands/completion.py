"""``paddlectl completion SHELL``: the shell's completion script (paddlectl/completion.py)."""

from __future__ import annotations

from paddlectl.completion import SHELLS, script

DESCRIPTION = """
Prints the completion script of SHELL. Load it in the current shell, or for every new one:

  bash  source <(paddlectl completion bash)    (or that line in ~/.bashrc)
  zsh   source <(paddlectl completion zsh)     (or that line in ~/.zshrc, after compinit)
  fish  paddlectl completion fish | source     (or the script in
                                               ~/.config/fish/completions/paddlectl.fish)

Subcommands and flags complete, and so do your job names, registry names and PFS paths,
asked of the current datacenter's portal as you type.
"""


def setup_completion(parser) -> None:
    parser.description = DESCRIPTION
    parser.add_argument("shell", metavar="SHELL", choices=SHELLS, help=", ".join(SHELLS))


def run_completion(ctx, args) -> None:
    ctx.stdout.write(script(args.shell))
