"""Commands other distributions add to `stepscope`, found by entry point.

A distribution declares ``[project.entry-points."stepscope.commands"] NAME = "module:function"``;
`stepscope NAME ARGS...` then calls ``function(ARGS)`` and exits with its return value. The
plugin parses its own arguments (and ``--help``). The core never imports a plugin's module
until its command is run, so a missing or broken plugin costs the other commands nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

ENTRY_POINT_GROUP = "stepscope.commands"
# Plugins for people who work on stepscope itself: they run, but `stepscope --help` does not
# list them among the user's commands. `dev` builds Kubernetes from source; its node needs root.
CONTRIBUTOR_COMMANDS = frozenset({"dev"})


@dataclass(frozen=True)
class CommandPlugin:
    """One plugin command: its entry point, loaded only when run."""

    entry_point: EntryPoint

    @property
    def listed(self) -> bool:
        """Whether `stepscope --help` lists it among the user's commands."""
        return self.entry_point.name not in CONTRIBUTOR_COMMANDS

    @property
    def summary(self) -> str:
        return f"from {self.entry_point.value.split(':')[0]} (a plugin)"

    def run(self, argv: list[str]) -> int:
        command: Callable[[list[str]], int] = self.entry_point.load()
        return command(argv)


def command_plugins() -> dict[str, CommandPlugin]:
    """The installed plugin commands by name, in name order."""
    found = entry_points(group=ENTRY_POINT_GROUP)
    return {ep.name: CommandPlugin(ep) for ep in sorted(found, key=lambda ep: ep.name)}
