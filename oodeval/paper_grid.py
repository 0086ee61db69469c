"""The worst+gap paper's grid and setup: its 14 algorithms, SR-CMNIST Ratios and Scales, seeds,
and the DomainBed training constants of its setup; the grids of the image experiments.

The one home of these constants (torch-free, importing nothing): the algorithm registry, the
SR-CMNIST family, the study presets and the GPU check read them from here.

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
#: The seeds of every unit of the grid (Section 5.1: 3 per algorithm and scenario).
SEEDS: tuple[int, ...] = (0, 1, 2)
#: DomainBed's training length and checkpoint period for MNIST (N_STEPS, CHECKPOINT_FREQ).
PAPER_STEPS = 5001
PAPER_EVAL_EVERY = 100
#: DomainBed's batch size for small images (rows per environment and step).
PAPER_BATCH_SIZE = 64
#: DomainBed's ColoredMNIST resolution: 2x28x28, the side MNIST_CNN is built for.
PAPER_SIZE = 28

#: The image experiments (`oodeval.study.presets`: paper-images, nico) follow DomainBed's
#: protocol for its image datasets: CHECKPOINT_FREQ 300, batch size 32, 224 x 224 images.
IMAGE_EVAL_EVERY = 300
IMAGE_BATCH_SIZE = 32
IMAGE_SIZE = 224
#: C-Cats&Dogs' and L-CIFAR10's ratios (Table 2); each E_given has 5 environments (Sec. 4.2).
IMAGE_RATIOS: tuple[str, ...] = ("3:2", "4:1", "5:0")
IMAGE_RATIO_GIVEN = 5
#: PACS-corrupted's and VLCS-corrupted's Envs patterns (Tables 3 and 4): corruptions drawn per
#: base domain, so N = the sum of a pattern's counts.
CORRUPTED_PATTERNS: dict[str, tuple[str, ...]] = {
    "PACS-corrupted": ("1-1-1-1", "2-2-2-2", "1-0-1-1", "2-0-2-2"),
    "VLCS-corrupted": ("1-1-1-1", "2-2-2-2"),
}
#: The DomainBed algorithms NICO++'s Tables 2 and 5 report (its Deepall is ERM).
NICO_ALGORITHMS: tuple[str, ...] = (
    "ERM", "IRM", "GroupDRO", "MLDG", "CORAL", "MMD", "SagNet", "RSC",
)  # fmt: skip
