"""What people read: the HTML report, its plots and heatmaps, and the merged trace.

May import every other analysis package; none of them imports it.
"""
