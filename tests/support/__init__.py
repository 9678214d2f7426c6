"""Helpers shared by every test tier, importable as ``support`` (pyproject's pytest
``pythonpath`` puts ``tests/`` on the path, so no test edits ``sys.path``).

The harness's own homes are re-exported here, so tests and `stepscope dev` wait and pick
ports the same way: `free_port` and `wait_for_port` (``stepscope_dev.net``) and `wait_until`
(``stepscope_dev.waiting``). `support.operator_helpers` runs the real operator for the
integration and e2e tiers.
"""

from stepscope_dev.net import free_port, wait_for_port
from stepscope_dev.waiting import wait_until

__all__ = ["free_port", "wait_for_port", "wait_until"]
