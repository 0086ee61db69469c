"""How to run the M stacked MNIST_CNNs' convolutions: seconds of one forward + backward per layout.

The faithful unit's LOO stack: M = 4 models, 192 rows each (3 environments x 64), 2x28x28, float32,
one thread (``--threads``). Contenders, all oodeval's `MNISTCNNFeaturizer` (the same parameters):

- per model, channels-last (``conv_layout("per_model")`` on the CPU, the default there);
- per model, NCHW (the same calls on default-layout tensors: what oodeval ran before);
- grouped (``conv_layout("grouped")``: one grouped convolution per layer, groups = M);
- vmap: ``torch.func.vmap`` over ``torch.func.functional_call`` of a one-model featurizer,
  batched over the models' parameter rows (PyTorch lowers the batched convolutions itself).

Each is warmed up once, then timed `--repeats` times interleaved; the best counts; the ratio is
against the per-model channels-last layout.

Run:  python benchmarks/conv_layouts.py [--models 4] [--rows 192] [--device cpu]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
from torch.func import functional_call, vmap

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import oodeval.algorithms.networks as networks  # noqa: E402
from oodeval.algorithms.networks import MNISTCNNFeaturizer, conv_layout  # noqa: E402


def contenders(m: int, rows: int, device: str) -> dict:
    torch.manual_seed(0)
    net = MNISTCNNFeaturizer(m, (2, 28, 28)).to(device)
    one = MNISTCNNFeaturizer(1, (2, 28, 28)).to(device)
    x = torch.rand(m, rows, 2, 28, 28, device=device)
    stacked = {k: v[:, None] for k, v in net.named_parameters()}  # (M, 1, ...): one model each

    def layout(name: str):
        def run() -> None:
            with conv_layout(name):
                net(x).sum().backward()

        return run

    def in_nchw(run):
        def wrapped() -> None:
            keep = networks.model_images
            networks.model_images = lambda h: h
            try:
                run()
            finally:
                networks.model_images = keep

        return wrapped

    def vmapped() -> None:  # NCHW: vmap cannot ask for channels-last memory
        def model(params: dict, images: torch.Tensor) -> torch.Tensor:
            with conv_layout("per_model"):
                return functional_call(one, params, (images,))

        vmap(model)(stacked, x).sum().backward()

    return {
        "per model, channels-last (default on CPU)": layout("per_model"),
        "per model, NCHW (before)": in_nchw(layout("per_model")),
        "grouped (default on GPUs)": layout("grouped"),
        "vmap over functional_call": in_nchw(vmapped),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=4)
    parser.add_argument("--rows", type=int, default=192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"MNIST_CNN forward + backward, M={args.models} models x {args.rows} rows, 2x28x28, "
        f"{args.device}, {args.threads} thread(s), load_avg_1min={os.getloadavg()[0]:.1f}"
    )
    runs = contenders(args.models, args.rows, args.device)
    for run in runs.values():
        run()
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(args.repeats):
        for name, run in runs.items():
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            run()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            best[name] = min(best[name], time.perf_counter() - t0)
    base = best["per model, channels-last (default on CPU)"]
    for name, seconds in best.items():
        print(f"  {name:44s} {seconds:7.3f} s   {seconds / base:5.2f}x the per-model time")
    print(f"load_avg_1min at end={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
