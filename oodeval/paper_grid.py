"""The worst+gap paper's grid: its 14 algorithms and the SR-CMNIST Ratios and Scales it trains.

The one home of these constants (torch-free, importing nothing): the algorithm registry, the
SR-CMNIST family and the study presets read them from here.

>>> len(PAPER_ALGORITHMS), len(RATIOS) * len(SCALES)
(14, 12)
"""

from __future__ import annotations

#: The 14 DomainBed algorithms of the worst+gap paper (Section 5), in DomainBed's order.
PAPER_ALGORITHMS: tuple[str, ...] = (
    "ERM", "IRM", "GroupDRO", "Mixup", "MLDG", "CORAL", "MMD",
    "DANN", "CDANN", "MTL", "SagNet", "ARM", "VREx", "RSC",
)  # fmt: skip
#: SR-CMNIST's base ratios N_major:N_minor (Section 4.1).
RATIOS: tuple[str, ...] = ("3:1", "4:1", "5:1")
#: SR-CMNIST's Scales, multiplying both counts of a ratio (Section 4.1).
SCALES: tuple[int, ...] = (1, 2, 3, 4)
