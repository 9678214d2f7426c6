"""The fabric a collective runs over: bus-bandwidth factors and stated link peaks.

**Bus bandwidth.** A collective that moves ``S`` bytes in ``t`` seconds has an algorithm
bandwidth ``S / t``. How much each link carried depends on the collective and the group
size ``n``; NCCL's performance notes (nccl-tests, ``doc/PERFORMANCE.md``) scale the
algorithm bandwidth into a *bus bandwidth* that is comparable with the hardware's peak
whatever the collective:

* all_reduce: ``2(n-1)/n`` (a reduce-scatter then an all-gather)
* all_gather, reduce_scatter, all_to_all, gather, scatter: ``(n-1)/n``
* broadcast, reduce, send, recv, send/recv: ``1``

``S`` is the larger of the input and output messages (``In``/``Out msg nelems`` times the
dtype's width): the full buffer of an all_reduce, the gathered output of an all_gather,
the scattered input of a reduce_scatter, as nccl-tests counts them.

**Peaks.** Unidirectional, per GPU, in GB/s (10^9 bytes per second), as the vendors
publish them: the bus bandwidth of a well-tuned ring approaches this figure, so a
collective far below it is not limited by the link. ``LINKS`` holds the figures;
``INTRA_NODE_LINKS`` says which link joins the GPUs of one node for a GPU model (read from
the trace's ``deviceProperties``), and ``INTER_NODE_LINKS`` which network card per GPU
that model's reference system (DGX) pairs it with. Real clusters differ, so both are
overridden by ``stepscope analyze --link-peak intra=...,inter=...`` or ``FabricOptions``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field


def bus_factor(collective: str, group_size: int) -> float | None:
    """NCCL's bus-bandwidth factor for `collective` over `group_size` ranks; None for a
    collective that moves no payload (barrier) or that NCCL gives no factor."""
    n = group_size
    if n < 1:
        return None
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce", "send", "recv", "send_recv"):
        return 1.0
    return None


@dataclass(frozen=True)
class Link:
    """One interconnect and its published unidirectional per-GPU bandwidth."""

    name: str
    peak_gbps: float
    basis: str


LINKS = {
    link.name: link
    for link in (
        Link("NVLink 2", 150.0, "V100 SXM2: 6 links x 25 GB/s each way (300 GB/s both ways)"),
        Link("NVLink 3", 300.0, "A100 SXM4: 12 links x 25 GB/s each way (600 GB/s both ways)"),
        Link("NVLink 4 bridge", 300.0, "H100 NVL pair: NVLink bridge, 600 GB/s both ways"),
        Link("NVLink 4", 450.0, "H100/H200 SXM5: 18 links x 25 GB/s each way (900 GB/s)"),
        Link("NVLink 5", 900.0, "B200/GB200: 18 links x 50 GB/s each way (1.8 TB/s)"),
        Link("PCIe Gen3 x16", 15.75, "8 GT/s x 16 lanes, 128b/130b, each way"),
        Link("PCIe Gen4 x16", 31.5, "16 GT/s x 16 lanes, 128b/130b, each way"),
        Link("PCIe Gen5 x16", 63.0, "32 GT/s x 16 lanes, 128b/130b, each way"),
        Link("InfiniBand EDR", 12.5, "100 Gb/s per port"),
        Link("InfiniBand HDR", 25.0, "200 Gb/s per port"),
        Link("InfiniBand NDR", 50.0, "400 Gb/s per port"),
        Link("RoCE 100G", 12.5, "100 Gb/s Ethernet per port"),
        Link("RoCE 200G", 25.0, "200 Gb/s Ethernet per port"),
        Link("RoCE 400G", 50.0, "400 Gb/s Ethernet per port"),
    )
}

# (pattern on the CUDA device name, intra-node link, inter-node link per GPU). First match
# wins, so the PCIe boards come before the SXM ones of the same family. The inter-node
# link is the reference system's: DGX-1/2 (V100) one EDR port per GPU or two, DGX A100 one
# HDR port per GPU, DGX H100/H200/B200 one NDR port per GPU.
GPU_LINKS: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), intra, inter)
    for pattern, intra, inter in (
        (r"V100.*PCIE", "PCIe Gen3 x16", "InfiniBand EDR"),
        (r"V100", "NVLink 2", "InfiniBand EDR"),
        (r"A100.*PCIE", "PCIe Gen4 x16", "InfiniBand HDR"),
        (r"A100", "NVLink 3", "InfiniBand HDR"),  # SXM4 boards, A100-PG509 among them
        (r"H100.*PCIE", "PCIe Gen5 x16", "InfiniBand NDR"),
        (r"H100 NVL", "NVLink 4 bridge", "InfiniBand NDR"),
        (r"H100|H200|H800|GH200", "NVLink 4", "InfiniBand NDR"),
        (r"B200|GB200|B100", "NVLink 5", "InfiniBand NDR"),
        (r"\b(A10|A40|L4|L40S?|A30)\b", "PCIe Gen4 x16", "RoCE 100G"),
        (r"\bT4\b", "PCIe Gen3 x16", "RoCE 100G"),
    )
)

INTRA, INTER, UNKNOWN = "intra", "inter", "unknown"
MAX_PEAK_GBPS = 100_000.0
MAX_RANKS_PER_NODE = 4096


class LinkPeak(BaseModel):
    """The peak a group's bus bandwidth is measured against, and where it came from."""

    model_config = ConfigDict(extra="forbid")

    link: str = Field(description="The link's name, e.g. 'NVLink 3', or 'stated'.")
    peak_gbps: float = Field(gt=0, le=MAX_PEAK_GBPS)
    basis: str = Field(description="The published figure, or the option that set it.")


class FabricOptions(BaseModel):
    """What the analysis is told about the fabric; every field is optional."""

    model_config = ConfigDict(extra="forbid")

    ranks_per_node: int | None = Field(
        None,
        ge=1,
        le=MAX_RANKS_PER_NODE,
        description="Ranks on each node, numbered node by node; unset: the GPUs the trace's "
        "host lists (an assumption the table states). A placement's node names win.",
    )
    intra_peak_gbps: float | None = Field(
        None, gt=0, le=MAX_PEAK_GBPS, description="GB/s each way per GPU inside a node."
    )
    inter_peak_gbps: float | None = Field(
        None, gt=0, le=MAX_PEAK_GBPS, description="GB/s each way per GPU between nodes."
    )


def parse_link_peaks(text: str) -> tuple[float | None, float | None]:
    """``intra=300,inter=50`` (GB/s) into (intra, inter); ValueError naming the flag."""
    usage = "pass --link-peak intra=GBPS,inter=GBPS (either or both), e.g. intra=300,inter=50"
    peaks: dict[str, float] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or key not in (INTRA, INTER):
            raise ValueError(
                f"--link-peak {text!r}: {item.strip()!r} is not intra= or inter=; {usage}"
            )
        try:
            gbps = float(value)
        except ValueError:
            raise ValueError(f"--link-peak {text!r}: {value!r} is not a number; {usage}") from None
        if not 0 < gbps <= MAX_PEAK_GBPS:
            raise ValueError(
                f"--link-peak {text!r}: {key} must be above 0 and at most {MAX_PEAK_GBPS:g} GB/s"
            )
        peaks[key] = gbps
    return peaks.get(INTRA), peaks.get(INTER)


def link_peak(scope: str, device_names: list[str], options: FabricOptions) -> LinkPeak | None:
    """The peak for a group that stays inside a node (`scope` intra) or crosses nodes
    (inter): the stated option first, else the table's link for the GPU model; None when
    neither is known (an unknown scope, a GPU the table lacks)."""
    stated = options.intra_peak_gbps if scope == INTRA else options.inter_peak_gbps
    if scope == UNKNOWN:
        return None
    if stated is not None:
        return LinkPeak(link=f"stated {scope}-node", peak_gbps=stated, basis="--link-peak")
    for name in device_names:
        for pattern, intra, inter in GPU_LINKS:
            if pattern.search(name):
                link = LINKS[intra if scope == INTRA else inter]
                basis = f"{name}: {link.basis}"
                if scope == INTER:
                    basis += " (the reference system's NIC per GPU)"
                return LinkPeak(link=link.name, peak_gbps=link.peak_gbps, basis=basis)
    return None


def peak_table_markdown() -> str:
    """The peak table as docs/contributing/analysis.md shows it (a test keeps them equal)."""
    lines = ["| link | GB/s each way per GPU | published as |", "|---|---|---|"]
    lines += [f"| {link.name} | {link.peak_gbps:g} | {link.basis} |" for link in LINKS.values()]
    lines += ["", "| GPU (device name matches) | inside a node | between nodes |", "|---|---|---|"]
    # A pipe inside a table cell ends the cell unless escaped, even within backticks.
    lines += [
        f"| `{pattern.pattern.replace('|', chr(92) + '|')}` | {intra} | {inter} |"
        for pattern, intra, inter in GPU_LINKS
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(peak_table_markdown())
