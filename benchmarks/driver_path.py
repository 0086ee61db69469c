"""Count what a synthetic `oodeval study run` passes through on the driver side.

The driver is the process that reads the config, plans the units, hands them to the executor and
writes what comes back; the units themselves run in worker processes (``--workers 2``) and are
not counted. A profile hook records every oodeval function the driver process calls; the script
prints how many distinct modules (files) and functions that is, so that a change that adds or
removes hand-offs shows up as a number.

    python benchmarks/driver_path.py            # 14 algorithms x 3 seeds, one scenario
    python benchmarks/driver_path.py --list     # and the functions, by module
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import oodeval

CONFIG = """
name = "driver-path"
backend = "oodeval.study.synthetic"
algorithms = ["ERM", "IRM", "GroupDRO", "Mixup", "MLDG", "CORAL", "MMD", "DANN", "CDANN",
              "MTL", "SagNet", "ARM", "VREx", "RSC"]
seeds = [0, 1, 2]
steps = 5
scenarios = ["synthetic"]
"""

PACKAGE = str(Path(oodeval.__file__).resolve().parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the functions by module")
    args = parser.parse_args()

    from oodeval.cli.main import app

    seen: set[tuple[str, str]] = set()

    def hook(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call":
            filename = frame.f_code.co_filename
            if filename.startswith(PACKAGE):
                seen.add((filename[len(PACKAGE) + 1 :], frame.f_code.co_qualname))

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp, "study.toml")
        config.write_text(CONFIG, encoding="utf-8")
        argv = ["study", "run", str(config), "--out", str(Path(tmp, "out")), "--workers", "2",
                "--no-progress"]
        sys.setprofile(hook)
        try:
            app(argv, standalone_mode=False)
        finally:
            sys.setprofile(None)
    # module-level code (imports) is not a hand-off: count functions only
    functions = {(f, q) for f, q in seen if q != "<module>"}
    files = {f for f, _ in functions}
    print(f"driver side of a synthetic study run: {len(files)} files, {len(functions)} functions")
    if args.list:
        for name in sorted(files):
            print(f"  {name}: " + ", ".join(sorted(q for f, q in functions if f == name)))


if __name__ == "__main__":
    main()
