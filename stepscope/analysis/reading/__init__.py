"""Reading one rank's raw inputs: trace bytes within limits, the streaming reader,
event classes, launches, step windows, NVML counters and memory peaks, and where traces live.

May import `model`; nothing that summarises, merges or renders.
"""
