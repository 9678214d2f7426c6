"""A ProfileSession's life: plan the window, arm the agents, follow, collect, render, write status.

Owns the session phases from Pending to a final phase, the queue and quota that admit a
session, and the analysis Job that summarises its ranks. May import the API models, the
operator's top-level modules (settings, context, kubeapi, metrics, conditions), `targets`,
`agents`, `storage` and `access`; never a raw-trace reader (the analysis Job reads traces).
"""
