"""Golden outputs: what users see stays byte-identical unless a commit means to change it.

The cases (tests/goldens/cases.py): `measures examples/results.csv` and `import domainbed` on the
DomainBed VLCS sweep in every format, and `study analyze` on the stored `quick` study (its printed
output in every format and every file it writes). A deliberate change regenerates them with
`python tests/goldens/make_goldens.py` and says why in the commit.
"""

from __future__ import annotations

import pytest

from tests.goldens.cases import DOMAINBED_SWEEP, GOLDENS, outputs
from tests.requires import requires_path


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    return outputs(tmp_path_factory.mktemp("goldens"), domainbed=DOMAINBED_SWEEP.is_dir())


STORED = sorted(p.name for p in GOLDENS.iterdir() if p.suffix not in (".py", ".gz", ""))


def test_the_goldens_cover_every_case(produced: dict[str, bytes]) -> None:
    requires_path(DOMAINBED_SWEEP, "the DomainBed VLCS sweep fixture")
    assert sorted(produced) == STORED
    # 4 formats x (measures, import domainbed, analyze), and the 16 analysis files
    assert len(STORED) == 28


@pytest.mark.parametrize("name", STORED)
def test_output_is_byte_identical(produced: dict[str, bytes], name: str) -> None:
    if name.startswith("import-domainbed"):
        requires_path(DOMAINBED_SWEEP, "the DomainBed VLCS sweep fixture")
    expected = (GOLDENS / name).read_bytes()
    assert produced[name] == expected, f"{name} changed; see tests/goldens/make_goldens.py"
