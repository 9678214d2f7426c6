"""The `stepscope` command: `analyze` traces, `diff` two runs, read a session's `artifacts`.

More commands come from plugins (`stepscope.cli.plugins`): the development harness adds
`stepscope dev` when it is installed, and the product runs without it.
"""

from __future__ import annotations

import argparse
import sys

from stepscope.cli.analyze import add_analyze_command
from stepscope.cli.artifacts import add_artifacts_command
from stepscope.cli.diff import add_diff_command
from stepscope.cli.plugins import command_plugins


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stepscope", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add_analyze_command(commands)
    add_artifacts_command(commands)
    add_diff_command(commands)
    for name, plugin in command_plugins().items():
        # Listed for --help only; main() hands the plugin its arguments before parsing.
        commands.add_parser(name, help=plugin.summary, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    plugin = command_plugins().get(argv[0]) if argv else None
    if plugin is not None:
        return plugin.run(argv[1:])
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
