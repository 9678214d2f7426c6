"""Per-namespace agent tokens, derived from the one token the operator owns.

The injected sidecar needs its token in the pod spec: a pod cannot reference a Secret in the
operator's namespace, and the webhook must not create Secrets (it has no side effects, so
``kubectl --dry-run=server`` and failurePolicy Ignore stay safe). Anyone who can read a pod can
read its env, so the token a pod carries is derived for its namespace only: reading pods in
``team-a`` never yields a token that arms agents in ``team-b``. The operator derives the same token
when it calls an agent, and the master token never leaves the operator.
"""

import hashlib
import hmac

_PURPOSE = b"stepscope-agent-token/v1/"


def agent_token_for_namespace(master_token: str, namespace: str) -> str:
    """The bearer token agents in ``namespace`` accept (hex HMAC-SHA256 of the master token)."""
    if not master_token:
        raise ValueError("the operator's agent token is empty: set STEPSCOPE_AGENT_TOKEN")
    if not namespace:
        raise ValueError("namespace is empty: agent tokens are derived per namespace")
    digest = hmac.new(master_token.encode(), _PURPOSE + namespace.encode(), hashlib.sha256)
    return digest.hexdigest()
