"""Comparing runs: is a session's step time different from a baseline's, and what changed.

Pure statistics over job summaries. May import `model`.
"""
