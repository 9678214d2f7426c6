"""FLOPs of CPU ops, from the profiler's ``flops`` argument or from recorded shapes.

With ``with_flops`` (the full tier) torch.profiler writes ``flops`` on the ops it has a
formula for; with ``record_shapes`` it writes ``Input Dims`` and ``Input type``, from
which the formulas below give the FLOPs of one call (a multiply-add is two FLOPs):

* ``mm`` [M,K]x[K,N], ``addmm`` (bias, [M,K], [K,N]): 2·M·K·N; the bias add is not counted.
* ``bmm`` [B,M,K]x[B,K,N], ``baddbmm`` (self, [B,M,K], [B,K,N]): 2·B·M·K·N.
* ``matmul`` [...,M,K]x[...,K,N]: 2·batch·M·K·N, batch the product of the broadcast
  leading dimensions (a 1-D operand is a row or column vector).
* ``linear`` (input [...,K], weight [N,K]): 2·rows·K·N, rows the product of input[:-1].
* ``convolution``/``_convolution`` (input [N,C,*S], weight [O,C/g,*k]):
  2·N·O·prod(S_out)·(C/g)·prod(k), S_out from the stride, padding and dilation in
  ``Concrete Inputs``; transposed: 2·N·prod(S)·prod(weight). Without those arguments the
  output size is unknown and the op is counted as unsized, not guessed. (The backend
  convolutions below ``_convolution`` order their arguments differently and are left out;
  ``_convolution`` is then the leaf.)
* ``convolution_backward`` (grad_out [N,O,*S_out], input, weight): the forward's FLOPs once
  for each of grad_input and grad_weight its ``output_mask`` asks for.
* scaled-dot-product attention, q [B,H,L,E], k [B,H,S,E], v [B,H,S,Ev]: the forward is
  2·B·H·L·S·(E+Ev) (Q·Kᵀ and P·V); the backward 2·B·H·L·S·(3E+2Ev) (the scores again,
  dP, dV, dQ and dK). A causal mask is not discounted.

These are the formulas of ``torch.utils.flop_counter`` (its ``FlopCounterMode`` counts a
real training step identically; the tests check it).

``matmul``, ``linear``, ``conv2d`` and ``scaled_dot_product_attention`` are composites
that call the others, so only the leaf is counted: an op whose thread shows another
FLOP-carrying op inside it is left out (``LeafFlops``). Precision is that of the first
input: bf16/fp16, fp32, or other (fp64, integers), which no peak covers.
"""

from __future__ import annotations

import math
from array import array

from stepscope.analysis.reading.classify import SHAPE_FLOP_OPS

# A frame per open FLOP-carrying op on a thread; real nesting is a few deep (linear ->
# matmul -> mm), so a deeper stack is a hostile trace and its deeper ops are dropped.
MAX_NESTING = 64
# Counted ops are kept (start, FLOPs, precision) until the step windows are known: 24
# bytes each, 24 MiB at the cap, far above a real window's thousands of matmuls per step.
MAX_FLOP_RECORDS = 1_000_000
PRECISIONS = ("bf16/fp16", "fp32", "other")
_HALF = frozenset({"c10::BFloat16", "c10::Half", "BFloat16", "Half", "bfloat16", "half"})
_FLOAT = frozenset({"float", "Float", "float32"})


def precision_index(args: dict) -> int:
    """Index into PRECISIONS of the op's first input."""
    types = args.get("Input type")
    first = types[0] if isinstance(types, list) and types else None
    if first in _HALF:
        return 0
    return 1 if first in _FLOAT else 2


def shape_flops(name: str, args: dict) -> float | None:
    """The FLOPs the formulas above give for one call, or None when the shapes do not."""
    dims = args.get("Input Dims")
    if not isinstance(dims, list) or name not in SHAPE_FLOP_OPS:
        return None
    try:
        shapes = [_shape(d) for d in dims]
        return _FORMULAS[_family(name)](shapes, args)
    except (ValueError, IndexError, TypeError):
        return None


def _shape(value: object) -> list[int] | None:
    if not isinstance(value, list):
        return None
    if any(type(n) is not int or n < 0 for n in value):
        raise ValueError("not a shape")
    return value


def _family(name: str) -> str:
    if "attention" in name:
        return "sdpa_backward" if name.endswith("_backward") else "sdpa"
    if "conv" in name:
        return "conv_backward" if name.endswith("_backward") else "conv"
    return name.removeprefix("aten::")


def _mm(shapes: list, _: dict) -> float:
    (m, k), (k2, n) = shapes[0], shapes[1]
    return _checked(2.0 * m * k * n, k == k2)


def _addmm(shapes: list, args: dict) -> float:
    return _mm(shapes[1:3], args)


def _bmm(shapes: list, _: dict) -> float:
    (b, m, k), (b2, k2, n) = shapes[0], shapes[1]
    return _checked(2.0 * b * m * k * n, k == k2 and b == b2)


def _baddbmm(shapes: list, args: dict) -> float:
    return _bmm(shapes[1:3], args)


def _matmul(shapes: list, _: dict) -> float:
    a, b = list(shapes[0]), list(shapes[1])
    if not a or not b:
        raise ValueError("a scalar operand")
    if len(a) == 1:
        a = [1, *a]
    if len(b) == 1:
        b = [*b, 1]
    *batch_a, m, k = a
    *batch_b, k2, n = b
    batch = math.prod(max(x, y) for x, y in _aligned(batch_a, batch_b))
    return _checked(2.0 * batch * m * k * n, k == k2)


def _aligned(a: list[int], b: list[int]) -> list[tuple[int, int]]:
    width = max(len(a), len(b))
    return list(zip([1] * (width - len(a)) + a, [1] * (width - len(b)) + b, strict=True))


def _linear(shapes: list, _: dict) -> float:
    x, weight = shapes[0], shapes[1]
    n, k = weight
    return _checked(2.0 * math.prod(x[:-1]) * k * n, x[-1] == k)


def _conv(shapes: list, args: dict) -> float | None:
    x, weight = shapes[0], shapes[1]
    spatial = len(x) - 2
    concrete = args.get("Concrete Inputs")
    if spatial < 1 or len(weight) != spatial + 2 or not isinstance(concrete, list):
        return None
    if len(concrete) > 6 and concrete[6] == "True":  # transposed
        return 2.0 * x[0] * math.prod(x[2:]) * math.prod(weight)
    stride, padding, dilation = (_int_list(concrete, i, spatial) for i in (3, 4, 5))
    if stride is None or padding is None or dilation is None:
        return None
    out = [
        (size + 2 * pad - dil * (kernel - 1) - 1) // step + 1
        for size, pad, dil, kernel, step in zip(
            x[2:], padding, dilation, weight[2:], stride, strict=True
        )
    ]
    if any(o <= 0 for o in out):
        return None
    per_output = weight[1] * math.prod(weight[2:])
    return 2.0 * x[0] * weight[0] * math.prod(out) * per_output


def _conv_backward(shapes: list, args: dict) -> float | None:
    grad_out, x, weight = shapes[0], shapes[1], shapes[2]
    concrete = args.get("Concrete Inputs")
    if not isinstance(concrete, list) or len(concrete) < 11 or concrete[7] != "False":
        return None
    mask = concrete[10].strip("[] ").split(",")
    grads = sum(1 for flag in mask[:2] if flag.strip() == "True")
    if len(grad_out) != len(x) or len(weight) != len(x) or grad_out[1] != weight[0]:
        return None
    return grads * 2.0 * x[0] * math.prod(weight) * math.prod(grad_out[2:])


def _int_list(concrete: list, index: int, length: int) -> list[int] | None:
    """A ``Concrete Inputs`` entry such as ``"[1, 1]"`` as ints (one value applies to all)."""
    if index >= len(concrete) or not isinstance(concrete[index], str):
        return None
    text = concrete[index].strip("[] ")
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        return None
    if len(values) == 1:
        values *= length
    return values if len(values) == length and all(v >= 0 for v in values) else None


def _sdpa(shapes: list, _: dict) -> float:
    (b, h, length, e), (_, _, s, e2), (_, _, s2, ev) = shapes[0], shapes[1], shapes[2]
    return _checked(2.0 * b * h * length * s * (e + ev), e == e2 and s == s2)


def _sdpa_backward(shapes: list, _: dict) -> float:
    # The backward's args start with grad_out, then q, k, v.
    (b, h, length, e), (_, _, s, e2), (_, _, s2, ev) = shapes[1], shapes[2], shapes[3]
    return _checked(2.0 * b * h * length * s * (3 * e + 2 * ev), e == e2 and s == s2)


def _checked(flops: float, consistent: bool) -> float:
    if not consistent:
        raise ValueError("inner dimensions differ")
    return flops


_FORMULAS = {
    "mm": _mm,
    "addmm": _addmm,
    "bmm": _bmm,
    "baddbmm": _baddbmm,
    "matmul": _matmul,
    "linear": _linear,
    "conv": _conv,
    "conv_backward": _conv_backward,
    "sdpa": _sdpa,
    "sdpa_backward": _sdpa_backward,
}


class LeafFlops:
    """FLOPs of the leaf FLOP-carrying ops, one ``add`` per op in a thread's start order.

    A frame stays open until an op on its thread starts after it ended; an op that starts
    inside it marks it as a composite, whose own FLOPs are then not counted.
    """

    def __init__(self) -> None:
        self._stacks: dict[object, list[list]] = {}
        self.starts = array("d")
        self.flops = array("d")
        self.precisions = array("b")
        self.counted = 0
        self.unsized = 0
        self.dropped = 0

    def add(self, tid: object, start: float, dur: float, flops: float | None, precision: int):
        stack = self._stacks.setdefault(tid, [])
        while stack and stack[-1][0] <= start:
            self._close(stack.pop())
        if stack:
            stack[-1][4] = True
        if len(stack) >= MAX_NESTING:
            self.dropped += 1
            return
        stack.append([start + dur, start, flops, precision, False])

    def _close(self, frame: list) -> None:
        _, start, flops, precision, composite = frame
        if composite:
            return
        if flops is None or not math.isfinite(flops) or flops < 0:
            self.unsized += 1
            return
        if len(self.starts) >= MAX_FLOP_RECORDS:
            self.dropped += 1
            return
        self.counted += 1
        self.starts.append(start)
        self.flops.append(flops)
        self.precisions.append(precision)

    def flush(self) -> None:
        for stack in self._stacks.values():
            while stack:
                self._close(stack.pop())
