"""One rank's summary: fold the reader's events into a bounded RankSummary.

May import `reading` and `model`.
"""
