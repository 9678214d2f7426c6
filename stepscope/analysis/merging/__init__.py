"""Merging ranks: one clock, lateness at collectives, counters across ranks, the job summary.

Works on rank summaries only, never on raw traces, so the operator may use it. May import
`model`, `findings` and `rank`.
"""
