"""The `stepscope` command: `analyze` traces, `diff` two runs, read a session's `artifacts`.

More commands come from plugins (`stepscope.cli.plugins`): the development harness adds
`stepscope dev` when it is installed, and the product runs without it. Contributor plugins
run but are left out of the listing, so a user's `--help` shows only a user's commands.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version

from stepscope.cli.analyze import add_analyze_command
from stepscope.cli.artifacts import add_artifacts_command
from stepscope.cli.diff import add_diff_command
from stepscope.cli.plugins import command_plugins

DISTRIBUTION = "stepscope"
# A source tree on sys.path without an installed distribution has no version to report.
UNKNOWN_VERSION = "unknown (not installed as a distribution)"
EXAMPLES = """\
examples:
  stepscope analyze ./traces                  # verdict, summary.json, report.html
  stepscope diff ./run-a ./run-b              # is B slower than A, and why
  stepscope artifacts llama-ft-1 -n team-a    # links to a profiled session's results

`stepscope COMMAND --help` describes each command, its inputs and the environment it reads."""


def package_version() -> str:
    """The installed distribution's version, or `UNKNOWN_VERSION` when none is installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return UNKNOWN_VERSION


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stepscope",
        description=__doc__.splitlines()[0],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    # Contributor plugins are left out: main() runs them before parsing, by name.
    listed = {name: p for name, p in command_plugins().items() if p.listed}
    commands = parser.add_subparsers(dest="command", required=True)
    add_analyze_command(commands)
    add_artifacts_command(commands)
    add_diff_command(commands)
    for name, plugin in listed.items():
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
