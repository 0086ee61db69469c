"""Many-environment datasets for studying DG measures (Section 4 of the worst+gap paper).

``build_scenario(family, source=..., seed=..., **params)`` returns a `Scenario` naming E_given and
E_all and yielding each environment's images (float32, N x C x H x W) and labels; ``load_source``
reads the images they are generated from.
"""

from oodeval.environments.base import Environment, Scenario
from oodeval.environments.families import FAMILIES, build_scenario
from oodeval.environments.source_kinds import ImageSource
from oodeval.environments.sources import load_source

__all__ = ["FAMILIES", "Environment", "ImageSource", "Scenario", "build_scenario", "load_source"]
