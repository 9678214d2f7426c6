"""Steps a mixed-precision gradient scaler skipped (part of the per-rank summary).

``torch.amp.GradScaler`` unscales the gradients each step
(``aten::_amp_foreach_non_finite_check_and_unscale_``) and moves its scale
(``aten::_amp_update_scale_``); when a gradient is inf or NaN it does not call
``optimizer.step()``, so that step has no ``Optimizer.step#...`` record. A step window
with scaler ops and no optimizer step is a skipped step.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_SKIPPED_STEPS = 256


class LossScaling(BaseModel):
    """Steps with a gradient scaler, and those whose optimizer step it skipped."""

    model_config = ConfigDict(extra="ignore")

    scaler_steps: int = Field(description="Step windows in which the scaler ran.")
    skipped_count: int = Field(description="Of those, steps with no Optimizer.step record.")
    skipped_steps: list[int] = Field(
        default_factory=list,
        max_length=MAX_SKIPPED_STEPS,
        description="Their step numbers, the first MAX_SKIPPED_STEPS.",
    )

    @property
    def skipped_fraction(self) -> float:
        return self.skipped_count / self.scaler_steps if self.scaler_steps else 0.0
