"""ProfileTrigger: watch jobs' step progress through their agents and open sessions on evidence.

The rules are pure and judge one job's samples (`bands`, `stragglers`, `stalls`, `data_wait`,
together in `judging`, over `samples`); `ledger` rate-limits firings, `seats` bounds the
triggers watched per namespace, `opening` builds the session a firing creates. `sampling`
probes one job, `firing` opens a session and tells it, and `watching` is the look a kopf timer
takes at each trigger.

May import `sessions` (probing and target listing, shared with the session lifecycle), the
`hang` rule of the core, `targets`, `agents` and the API models; nothing imports it but the
handlers.
"""
