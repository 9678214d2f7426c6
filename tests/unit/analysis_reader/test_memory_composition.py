"""What the allocated peak is made of, by the phase of the step that allocated each byte.

The GPU cases place ``[memory]`` events in a public DDP trace at moments read straight
from its JSON (the step, its first backward op, its optimizer step), so the expected
parts are known by construction. The CPU cases are real torch.profiler runs on this
machine, checked against what torch itself says: the parameters' gradients, and the
tensors autograd saved for backward (``saved_tensors_hooks``).
"""

from __future__ import annotations

import random

import pytest
import torch
from derived_traces import load, write

from stepscope.analysis import summarize_rank
from stepscope.analysis.findings.memory_advice import freeing_advice
from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.model.rank_summary import MemoryComposition
from stepscope.analysis.reading import memory_composition
from stepscope.analysis.reports.html import render_report
from stepscope.api.memory_status import memory_peak_status
from stepscope.cli.analyze import verdict_lines

TRACE = "ddp-2rank-nccl-rank0.json.gz"
GIB = 1024**3
STEP = 5


@pytest.fixture(scope="module")
def original(shared_traces):
    return load(shared_traces / TRACE)


def step_phases(document: dict, step: int) -> dict[str, float]:
    """The step's start and end, its first backward op and its optimizer step, from the JSON."""
    events = document["traceEvents"]
    (span,) = [e for e in events if e.get("name") == f"ProfilerStep#{step}"]
    start, end = span["ts"], span["ts"] + span["dur"]

    def inside(e: dict) -> bool:
        return e.get("ph") == "X" and start <= e["ts"] < end

    backward = min(
        e["ts"]
        for e in events
        if inside(e) and e["name"].startswith("autograd::engine::evaluate_function: ")
    )
    (optimizer,) = [
        e
        for e in events
        if inside(e) and e["cat"] == "user_annotation" and e["name"].startswith("Optimizer.step#")
    ]
    return {
        "start": start,
        "backward": backward,
        "optimizer": optimizer["ts"],
        "optimizer_end": optimizer["ts"] + optimizer["dur"],
        "end": end,
    }


def with_phased_memory(document: dict, moves: list[tuple[float, int, int]], held: int) -> dict:
    """``document`` with one GPU ``[memory]`` event per (ts, addr, bytes) move, after ``held``
    bytes allocated before the window; written in shuffled order, as the reader must not
    depend on it."""
    allocated, reserved, memory = held, held, []
    for ts, addr, size in sorted(moves):
        allocated += size
        reserved = max(reserved, allocated)
        memory.append(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[memory]",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "args": {
                    "Total Reserved": reserved,
                    "Total Allocated": allocated,
                    "Bytes": size,
                    "Device Id": 0,
                    "Device Type": 1,
                    "Addr": addr,
                },
            }
        )
    random.Random(7).shuffle(memory)
    derived = {k: v for k, v in document.items() if k != "traceEvents"}
    derived["profile_memory"] = 1
    derived["traceEvents"] = document["traceEvents"] + memory
    return derived


def near_capacity_moves(phases: dict[str, float]) -> list[tuple[float, int, int]]:
    """14 GiB held; forward allocates 12 then 8 GiB and frees 2 GiB held from before;
    backward allocates 4 GiB (the peak: 36 GiB), then frees the forward's 12 GiB; the
    optimizer allocates and frees 1 GiB."""
    forward_mid = (phases["start"] + phases["backward"]) / 2
    optimizer_mid = (phases["optimizer"] + phases["optimizer_end"]) / 2
    return [
        (phases["start"] + 1, 0xA000, 12 * GIB),
        (forward_mid, 0xB000, 8 * GIB),
        (forward_mid + 1, 0x9000, -2 * GIB),  # allocated before the window
        (phases["backward"] + 1, 0xC000, 4 * GIB),
        (phases["backward"] + 2, 0xA000, -12 * GIB),
        (optimizer_mid, 0xD000, 1 * GIB),
        (optimizer_mid + 1, 0xD000, -1 * GIB),
    ]


@pytest.fixture(scope="module")
def near_capacity(original, tmp_path_factory):
    phases = step_phases(original, STEP)
    document = with_phased_memory(original, near_capacity_moves(phases), held=14 * GIB)
    return write(document, tmp_path_factory.mktemp("composition") / "rank0.json.gz")


def test_the_gpu_peak_is_split_by_the_phase_that_allocated_it(near_capacity):
    composition = summarize_rank(near_capacity).memory.composition
    assert composition == MemoryComposition(
        peak_bytes=36 * GIB,
        step=STEP,
        phase="backward",
        held_bytes=12 * GIB,
        forward_bytes=20 * GIB,
        backward_bytes=4 * GIB,
        optimizer_bytes=0,
        other_bytes=0,
        unexplained_bytes=0,
    )


def test_near_capacity_the_finding_says_what_each_change_frees(near_capacity):
    rank0 = summarize_rank(near_capacity)
    job = merge_ranks([rank0, rank0.model_copy(update={"rank": 1})])
    (risk,) = [f for f in job.findings if f.id == "out-of-memory-risk"]
    # 36 GiB of 39.4 GiB: 91%; the parts over the 36 GiB peak.
    assert "the 36.0 GiB allocated peak (step 5, backward)" in risk.evidence.text
    assert f"activations and forward outputs {100 * 20 / 36:.0f}%" in risk.evidence.text
    assert f"held from before the window {100 * 12 / 36:.0f}%" in risk.evidence.text
    assert f"gradients and backward buffers {100 * 4 / 36:.0f}%" in risk.evidence.text
    assert risk.evidence.numbers["forward_bytes"] == 20 * GIB
    assert "checkpointing of the repeated blocks would free up to ~20.0 GiB" in (
        risk.recommendation
    )
    # FSDP over 2 ranks keeps half of the 12 GiB held and the 4 GiB of gradients.
    assert "FSDP (or ZeRO-3) over the 2 ranks" in risk.recommendation
    assert f"freeing ~{(12 + 4) / 2:.1f} GiB per rank" in risk.recommendation


def test_the_report_the_cli_and_the_status_carry_the_composition(near_capacity):
    job = merge_ranks([summarize_rank(near_capacity)])
    report = render_report(job)
    assert '<section id="memory">' in report and "36.0 GiB" in report
    (line,) = [line for line in verdict_lines(job) if line.startswith("memory:")]
    assert line.startswith("memory: rank 0: the 36.0 GiB allocated peak")
    status = memory_peak_status(job)
    assert (status.rank, status.peak_mib, status.step) == (0, 36 * 1024, STEP)
    assert status.held_pct == pytest.approx(100 * 12 / 36, abs=0.05)
    assert status.activations_pct == pytest.approx(100 * 20 / 36, abs=0.05)
    assert status.gradients_pct == pytest.approx(100 * 4 / 36, abs=0.05)
    assert status.other_pct == 0


def test_sharding_advice_scales_with_the_world_and_needs_a_dominant_part():
    composition = MemoryComposition(
        peak_bytes=64 * GIB, held_bytes=24 * GIB, forward_bytes=8 * GIB, backward_bytes=8 * GIB
    )
    (advice,) = freeing_advice(composition, world_size=8)
    assert f"freeing ~{(24 + 8) * 7 / 8:.1f} GiB per rank" in advice
    assert freeing_advice(composition, world_size=1) == []  # nothing to shard over
    small = composition.model_copy(update={"held_bytes": 4 * GIB, "backward_bytes": 2 * GIB})
    assert freeing_advice(small, world_size=8) == []  # neither part is a quarter


def test_events_that_do_not_add_up_are_reported_and_kept_out_of_status(original, tmp_path):
    phases = step_phases(original, STEP)
    moves = near_capacity_moves(phases)
    document = with_phased_memory(original, moves, held=14 * GIB)
    dropped = [e for e in document["traceEvents"] if e.get("name") == "[memory]"]
    # Lose the 8 GiB allocation's event: the totals still say it was there.
    (lost,) = [e for e in dropped if e["args"]["Bytes"] == 8 * GIB]
    document["traceEvents"].remove(lost)
    summary = summarize_rank(write(document, tmp_path / "rank0.json.gz"))
    composition = summary.memory.composition
    assert composition.unexplained_bytes == 8 * GIB
    assert composition.forward_bytes == 12 * GIB
    assert memory_peak_status(merge_ranks([summary])) is None


def test_past_its_bound_or_without_backward_the_composition_is_not_guessed(
    original, tmp_path, monkeypatch
):
    phases = step_phases(original, STEP)
    moves = near_capacity_moves(phases)
    path = write(with_phased_memory(original, moves, held=14 * GIB), tmp_path / "r.json.gz")
    monkeypatch.setattr(memory_composition, "MAX_RECORDED_ALLOCATIONS", len(moves) - 1)
    memory = summarize_rank(path).memory
    assert memory.composition is None and memory.peak_allocated_bytes == 36 * GIB
    monkeypatch.undo()
    no_backward = with_phased_memory(original, moves, held=14 * GIB)
    no_backward["traceEvents"] = [
        e
        for e in no_backward["traceEvents"]
        if not str(e.get("name", "")).startswith("autograd::engine::evaluate_function: ")
    ]
    memory = summarize_rank(write(no_backward, tmp_path / "nb.json.gz")).memory
    assert memory.composition is None and memory.peak_allocated_bytes == 36 * GIB


def profile_cpu_steps(tmp_path, model: torch.nn.Module, batch: int, inputs: int):
    """Three profiled steps of ``model`` with Adam after one warm-up step; the trace's
    path, the batch of the last step's shape and the optimizer."""
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    path = tmp_path / "cpu.json"
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=3)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        profile_memory=True,
        on_trace_ready=lambda profiler: profiler.export_chrome_trace(str(path)),
    ) as profiler:
        for _ in range(4):
            optimizer.zero_grad()
            model(torch.randn(batch, inputs)).square().mean().backward()
            optimizer.step()
            profiler.step()
    return path


def mlp(width: int) -> torch.nn.Module:
    """256 inputs, two hidden layers of ``width``, 8 outputs."""
    return torch.nn.Sequential(
        torch.nn.Linear(256, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
        torch.nn.ReLU(), torch.nn.Linear(width, 8),
    )  # fmt: skip


def test_a_real_cpu_run_peaking_in_adam_holds_every_gradient(tmp_path):
    model = mlp(width=1024)
    path = profile_cpu_steps(tmp_path, model, batch=512, inputs=256)
    composition = summarize_rank(path, rank=0).memory.composition
    assert composition.phase == "optimizer"
    # Every parameter's gradient is alive during the optimizer's step, and nothing else
    # backward allocated; nothing from forward is (the batch and the loss died with the
    # graph), so the rest is Adam's own temporaries, less the few bytes the process
    # allocated while the profiler warmed up (CPU totals start with the profiler, so the
    # part held from before is not reported).
    assert composition.backward_bytes == sum(p.nbytes for p in model.parameters())
    assert composition.forward_bytes == 0 and composition.other_bytes == 0
    assert composition.unexplained_bytes == 0 and composition.held_bytes is None
    warm_up = composition.peak_bytes - composition.backward_bytes - composition.optimizer_bytes
    assert 0 <= warm_up < 4096


def test_a_real_cpu_run_peaking_in_backward_is_mostly_saved_activations(tmp_path):
    model = mlp(width=512)
    path = profile_cpu_steps(tmp_path, model, batch=8192, inputs=256)
    composition = summarize_rank(path, rank=0).memory.composition
    assert composition.phase == "backward" and composition.unexplained_bytes == 0
    saved = saved_activation_bytes(model, torch.randn(8192, 256))
    # Alive at a backward peak: what autograd saved, less what finished nodes released.
    assert 0.9 * saved <= composition.forward_bytes <= saved + 64
    assert composition.share_pct(composition.forward_bytes) > 40


def saved_activation_bytes(model: torch.nn.Module, batch: torch.Tensor) -> int:
    """Bytes of the tensors autograd saves for backward, parameters left out, by storage."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(batch).square().mean()
    return sum(saved.values())


def test_a_summary_claiming_an_impossible_peak_stays_out_of_status(near_capacity):
    summary = summarize_rank(near_capacity)
    lying = summary.memory.composition.model_copy(
        update={"peak_bytes": 2**60, "held_bytes": 2**60, "forward_bytes": 0, "backward_bytes": 0}
    )
    forged = summary.model_copy(
        update={"memory": summary.memory.model_copy(update={"composition": lying})}
    )
    assert memory_peak_status(merge_ranks([forged])) is None
    assert memory_peak_status(merge_ranks([summary])).peak_mib == 36 * 1024


def test_parts_past_the_peak_read_as_at_most_the_whole_peak():
    # A summary's parts may add up to more than its peak (a tenant's, or a lost free).
    composition = MemoryComposition(
        peak_bytes=GIB, forward_bytes=50 * GIB, unexplained_bytes=-49 * GIB
    )
    assert composition.share_pct(composition.forward_bytes) == 100.0
