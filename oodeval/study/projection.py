"""A study's projected wall time: the `Estimate` both estimators give, and a unit's checkpoints.

`oodeval.study.estimate` projects from whole sampled units, `oodeval.study.estimate_steps` from a
few timed training steps per algorithm; both return an `Estimate` and count a unit's checkpoint
evaluations with `unit_checkpoints`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from oodeval._text import safe_text
from oodeval.study.config import StudyConfig
from oodeval.tables import text_table


@dataclass(frozen=True)
class Estimate:
    """A projection: measured sample units, per-N predicted unit times, the projected total."""

    samples: pd.DataFrame  # per sampled unit: scenario, n_given, algorithm, seconds
    per_n: pd.DataFrame  # n_given, unit_seconds (predicted, full steps), units_in_study, measured
    workers: int
    steps_fraction: float
    sample_wall_seconds: float
    projected_seconds: float
    failed: int
    #: all algorithms' mean unit time over the sampled ones', at the smallest N (1 without others)
    mix_factor: float = 1.0
    #: the device the sample trained on (resolved)
    device: str = "cpu"
    #: training steps of each sampled unit when timed by `sample_steps`, else None
    sample_steps: int | None = None

    def summary(self) -> str:
        """A few human lines: the table per N and the projected total."""
        if self.sample_steps is not None:
            sampled = (
                f"timed {len(self.samples)} (algorithm, N_given) sample(s) at "
                f"{self.sample_steps} training step(s) each in {self.sample_wall_seconds:.1f} s "
                f"(in one worker process; assuming {self.workers} worker(s))"
            )
        else:
            sampled = (
                f"sampled {len(self.samples)} unit(s) at {self.steps_fraction:.0%} of the steps in "
                f"{self.sample_wall_seconds:.1f} s with {self.workers} worker(s); "
                f"{self.failed} failed"
            )
        lines = [
            f"measured on device {self.device}",
            sampled,
        ]
        cells = [
            [
                str(r.n_given),
                f"{r.unit_seconds:.1f}",
                str(r.units_in_study),
                "yes" if r.measured else "fit",
            ]
            for r in self.per_n.itertuples(index=False)
        ]
        header = ["N_given", "seconds/unit", "units", "measured"]
        lines.append(text_table(header, cells, right=[True, True, True, False]))
        if self.mix_factor != 1.0:
            n_min = int(self.per_n["n_given"].min())
            timed = sorted(set(self.samples.loc[self.samples["role"] == "sample", "algorithm"]))
            lines.append(
                safe_text(
                    f"every algorithm timed at N_given={n_min}: their mean unit costs "
                    f"{self.mix_factor:.2f}x the sampled ({', '.join(timed)}); every N is "
                    "scaled by it"
                )
            )
        hours = self.projected_seconds / 3600.0
        lines.append(
            f"projected wall time: {self.projected_seconds:.0f} s = {hours:.2f} h "
            f"with {self.workers} worker(s) on {self.device}"
        )
        lines.append(
            "seconds/unit is projected to the full number of steps; measured = timed in this "
            "sample, fit = from a quadratic fit of the timed units' seconds against N_given."
            if self.sample_steps is None
            else "seconds/unit: the mean over the study's algorithms of steps x their timed "
            "step + checkpoints x a checkpoint evaluation + the final test, scaled to each "
            "N_given like ERM's step (measured = ERM timed at that N_given, fit = power law)."
        )
        return "\n".join(lines)


def unit_checkpoints(config: StudyConfig) -> int:
    """Checkpoint evaluations of a unit of `config`: every ``eval_every`` steps (default 100, at
    most `steps`) and the last step; none with ``selection = "last"``.

    >>> from oodeval.study import preset
    >>> unit_checkpoints(preset("quick").replace(steps=250))
    3
    """
    if config.trainer.get("selection") == "last":
        return 0
    every = min(int(config.trainer.get("eval_every", 100)), config.steps)
    return config.steps // every + (config.steps % every != 0)
