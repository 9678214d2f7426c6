"""ProfileSchedule: periodic baseline sessions, the rolling baseline, and regressions.

May import `sessions` (a schedule creates sessions, and judges them with `sessions.baselines`),
`storage` and the API models; nothing imports it but the handlers.
"""
