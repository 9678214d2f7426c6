"""ProfileTrigger: watch jobs' step progress through their agents and open sessions on evidence.

The rules are pure and judge one job's samples (`bands`, `stragglers`, `stalls`, `data_wait`,
together in `judging`); `ledger` rate-limits firings, `opening` builds the session a firing
creates, and `watching` is the loop a kopf timer runs per trigger.

May import `sessions` (probing and target listing, shared with the session lifecycle), the
`hang` rule of the core, `targets`, `agents` and the API models; nothing imports it but the
handlers.
"""
