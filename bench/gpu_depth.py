"""The analysis's depth on a real GPU: a window whose steps hold a matmul chain, a CUDA graph
replay and a collective, and what the rank summary must then show.

``bench/gpu_check.py`` runs ``depth_step`` in one more window after the tier checks, at the
``full`` tier (MFU needs the input shapes only ``full`` records), and applies
``depth_problems`` to the summary. Each step of the window:

* multiplies bf16 matrices eagerly (``EAGER_MATMULS``): ops with shapes, so FLOPs and MFU;
* replays a CUDA graph captured once before the window (``torch.cuda.graphs``) holding
  ``GRAPH_MATMULS`` more: one ``cudaGraphLaunch``, its kernels carrying that call's id. The
  graph holds most of the step's GPU work, so if its kernels were read as idle time the
  busy time would fall short of them and the check would fail;
* all-reduces a tensor over a process group of its own (NCCL; of size 1 when the machine has
  one GPU, which is enough: the CPU side records ``record_param_comms`` like any other).

The checks need no GPU: ``tests/unit/agent/test_gpu_depth.py`` applies them to summaries of
public traces, which pass some and fail the others with the reason.
"""

from __future__ import annotations

from collections.abc import Callable

MATMUL_SIZE = 4096  # 24 replayed matmuls: milliseconds of GPU work, more than the host's per step
EAGER_MATMULS = 4
GRAPH_MATMULS = 24
ALL_REDUCE_ELEMENTS = 1 << 20
# The parts of a path add up to its step within this share (rank/critical_path.py rounds
# each part to 0.1 us; tests/unit/analysis_reader/test_critical_path.py holds the same).
ACCOUNTING_TOLERANCE = 0.001
# A step of matmuls keeps the GPU busy: its path is mostly work. Below half, the path would be
# mostly waiting and time between ops, which the workload does not do.
WORK_SHARE = 0.5
BUSY_TOLERANCE = 0.01  # breakdown intervals are rounded per step


def depth_step(device) -> Callable[[], None]:
    """Set up the workload on ``device`` (a process group, a captured graph) and return one
    step of it. Call ``close_depth`` after the window."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        # One process, one rank: an in-memory store needs no address or port.
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    left = torch.randn(MATMUL_SIZE, MATMUL_SIZE, device=device, dtype=torch.bfloat16)
    right = torch.randn(MATMUL_SIZE, MATMUL_SIZE, device=device, dtype=torch.bfloat16)
    replayed = torch.empty_like(left)

    def graph_body() -> None:
        for _ in range(GRAPH_MATMULS):
            torch.matmul(left, right, out=replayed)

    # As torch.cuda.graphs asks: warm up on a side stream, then capture.
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            graph_body()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_body()
    reduced = torch.ones(ALL_REDUCE_ELEMENTS, device=device)

    def step() -> None:
        product = left
        for _ in range(EAGER_MATMULS):
            product = product @ right
        graph.replay()
        dist.all_reduce(reduced)

    return step


def close_depth() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def depth_problems(rank, steps: int) -> list[str]:
    """What the depth window's ``RankSummary`` lacks; empty when it holds everything.
    ``steps`` is the number of steps the window recorded."""
    return [
        *path_problems(rank),
        *mfu_problems(rank),
        *collective_problems(rank, steps),
        *graph_problems(rank, steps),
    ]


def path_problems(rank) -> list[str]:
    """A critical path per step, whose parts add up to the step and whose work is most of it."""
    found = rank.critical_path
    if found is None or not found.steps:
        why = found.unknown_reason if found is not None else "no critical path in the summary"
        return [f"depth: no critical path ({why})"]
    problems = []
    for path in found.steps:
        if abs(path.accounted_ms - path.step_ms) > ACCOUNTING_TOLERANCE * path.step_ms:
            problems.append(
                f"depth: step {path.step}'s path accounts for {path.accounted_ms} ms of its "
                f"{path.step_ms} ms"
            )
        if path.length_ms < WORK_SHARE * path.step_ms:
            problems.append(
                f"depth: step {path.step}'s path is {path.length_ms} ms of work in a "
                f"{path.step_ms} ms step of matmuls"
            )
    return problems


def mfu_problems(rank) -> list[str]:
    """An MFU, as a fraction of the device's dense peak, in (0, 1]."""
    utilization = rank.utilization
    if utilization is None or utilization.median_mfu_pct is None:
        why = utilization.unknown_reason if utilization is not None else "not measured"
        return [f"depth: no MFU ({why})"]
    mfu = utilization.median_mfu_pct / 100
    return [] if 0 < mfu <= 1 else [f"depth: MFU {mfu:.3f} is outside (0, 1]"]


def collective_problems(rank, steps: int) -> list[str]:
    """The collective table (collective_bandwidth) holds an all_reduce row for every step."""
    table = rank.collective_bandwidth
    rows = [r for r in table.rows if r.collective == "all_reduce"] if table else []
    calls = sum(r.count for r in rows)
    if calls >= steps:
        return []
    seen = [(s.name, s.count) for s in rank.collective_stats]
    return [f"depth: {calls} all_reduce call(s) in the collective table for {steps} steps {seen}"]


def graph_problems(rank, steps: int) -> list[str]:
    """Every step's graph replay found with its kernels, and their time busy, not idle."""
    kinds = rank.launch_kinds
    if kinds is None or kinds.graph_launches < steps:
        launches = kinds.graph_launches if kinds is not None else 0
        return [f"depth: {launches} CUDA graph launch(es) for {steps} steps"]
    problems = []
    if kinds.graph_launches_without_kernels or kinds.graph_kernels < kinds.graph_launches:
        problems.append(
            f"depth: {kinds.graph_launches_without_kernels} of {kinds.graph_launches} graph "
            f"launches without kernels ({kinds.graph_kernels} kernels)"
        )
    busy = sum(s.breakdown.compute_ms + s.breakdown.comm_exposed_ms for s in rank.steps)
    if busy < (1 - BUSY_TOLERANCE) * kinds.graph_kernel_ms:
        problems.append(
            f"depth: the steps' busy GPU time ({busy:.3f} ms) is less than the graphs' "
            f"kernels alone ({kinds.graph_kernel_ms:.3f} ms): replayed time read as idle"
        )
    return problems
