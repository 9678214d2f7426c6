"""A hostile tenant for the shared operator (issue 24): what its sidecars answer
(`replies`, the one table of cases per agent endpoint), the agents that answer it
(`agents`), and its pods and sessions (`tenant`). The hostile-tenant tests and
bench/bench_hostile_tenant.py run the operator against it."""
