"""Optimizer steps a mixed-precision gradient scaler skipped (``model.loss_scaling``).

Every skipped step did its forward and backward for nothing. Dynamic loss scaling skips a
step now and then by design (it raises the scale every ``growth_interval`` steps, 2000 by
default, and halves it on overflow); more than ``FREQUENT_SKIP_FRACTION`` of a window's
steps is a scale that keeps overflowing or gradients that are inf/NaN for a real reason.
"""

from __future__ import annotations

from stepscope.analysis.model.job_summary import Evidence, Finding, JobSummary, Severity

FREQUENT_SKIP_FRACTION = 0.1


def skipped_steps(job: JobSummary) -> Finding | None:
    if job.efficiency is None:
        return None
    rows = [row for row in job.efficiency.skipped_steps if row.skipped_count]
    if not rows:
        return None
    skipped = sum(row.skipped_count for row in rows)
    scaled = sum(row.scaler_steps for row in job.efficiency.skipped_steps)
    fraction = skipped / scaled if scaled else 0.0
    frequent = fraction > FREQUENT_SKIP_FRACTION
    worst = max(rows, key=lambda row: (row.skipped_count, -row.rank))
    listed = worst.rank
    steps = next(s.loss_scaling.skipped_steps for s in job.ranks if s.rank == listed)
    return Finding(
        id="skipped-steps",
        severity=Severity.medium if frequent else Severity.info,
        title="The gradient scaler skipped optimizer steps",
        evidence=Evidence(
            text=(
                f"{skipped} of {scaled} scaled steps ({fraction:.0%}) across "
                f"{len(job.efficiency.skipped_steps)} rank(s) ran no optimizer step: a "
                f"gradient was inf or NaN. Rank {listed} skipped steps {steps[:8]}."
            ),
            numbers={
                "skipped_steps": float(skipped),
                "scaler_steps": float(scaled),
                "skipped_fraction": round(fraction, 4),
            },
        ),
        confidence=0.9,
        recommendation=(
            "Find where the loss or gradients overflow: lower the initial scale "
            "(GradScaler(init_scale=...)), clip gradients after scaler.unscale_, or train "
            "in bf16, which needs no loss scaling."
            if frequent
            else "Occasional skips are how dynamic loss scaling probes its scale; no action "
            "unless they recur."
        ),
        impact_pct=round(100.0 * fraction, 2),
        ranks=sorted(row.rank for row in rows),
    )
