"""ProfileSchedule: periodic baseline sessions, the baselines they keep, and regressions.

May import `sessions` (a schedule creates sessions and reads their summaries), `storage`,
the API models and the core's pure comparison; nothing imports it but the handlers.
"""
