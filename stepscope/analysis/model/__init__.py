"""The summaries analysis produces: one rank's, the job's, and NVML counter statistics.

Plain pydantic models with no I/O; every other analysis package (and the operator) reads
them. Imports nothing else of the analysis.
"""
