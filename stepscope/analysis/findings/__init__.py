"""Findings: one module per family of patterns, each with its evidence and advice.

Pure functions over summaries. May import `model`.
"""
