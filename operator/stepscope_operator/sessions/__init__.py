"""A ProfileSession's life: plan the window, arm the agents, follow, collect, render, write status.

Owns the session phases from Pending to a final phase, the queue and quota that admit a
session, per-rank byte budgets, the analysis Job that renders its report, the parsed view of
a session (`view`) with the one writer of its status (`status_writer`), and baselines: a
session compared with earlier ones (`baselines`, `comparing`). May import the API models, the
operator's top-level modules (settings, context, kubeapi, metrics, conditions), `targets`,
`agents` and `storage`; never `hang` or `schedules` (they build on it), never a raw-trace
reader (the analysis Job reads traces).
"""
