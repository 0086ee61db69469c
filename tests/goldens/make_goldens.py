"""Write the golden outputs that `tests/test_goldens.py` compares byte for byte.

Run it only when an output is meant to change, and say why in the commit:

    .venv/bin/python tests/goldens/make_goldens.py

The `quick` study's store (`quick-results.sqlite.gz`) was written once by
`oodeval study run --preset quick` on real MNIST; it is kept as it was, so the analysis files
depend on oodeval's numpy/pandas code only, never on one CPU's float32 training arithmetic.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.goldens.cases import GOLDENS, outputs  # noqa: E402

if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        for name, data in outputs(Path(scratch)).items():
            (GOLDENS / name).write_bytes(data)
            print(f"wrote {GOLDENS / name} ({len(data)} bytes)")
