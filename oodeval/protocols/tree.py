"""A ``<domain>/<class>/<image>`` tree and the domain-assignment rows the NICO++ protocols produce.

The tree is only listed, never read: a domain assignment names images by their path relative to
the root, so the CSV files work with any loader. `write_assignment_csv` / `read_assignment_csv`
hold the assignment file format (columns ``path,class,domain,role``) and `role_counts` the summary
table.
"""

from __future__ import annotations

import csv
import io
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from oodeval._files import write_file
from oodeval._names import refuse_lookalikes
from oodeval._text import read_text
from oodeval.environments.domains import NICO_COMMON_DOMAINS as NICO_COMMON_DOMAINS
from oodeval.environments.domains import NICO_TEST_DOMAINS as NICO_TEST_DOMAINS
from oodeval.environments.domains import NICO_TRAIN_DOMAINS as NICO_TRAIN_DOMAINS
from oodeval.environments.domains import check_domain_names
from oodeval.environments.folders import IMAGE_SUFFIXES
from oodeval.errors import OodevalError, listing

ROLES: tuple[str, ...] = ("train", "val", "test")
CSV_COLUMNS: tuple[str, ...] = ("path", "class", "domain", "role")
# NICO_TRAIN_DOMAINS, NICO_TEST_DOMAINS and NICO_COMMON_DOMAINS (Sec. 4.2, Table 2), imported above,
# are defined with the domains family (`oodeval.environments.domains`), which defaults to them.


@dataclass(frozen=True)
class AssignmentRow:
    """One image of a domain assignment: its path relative to the tree root, class, domain, role."""

    path: str
    cls: str
    domain: str
    role: str


@dataclass(frozen=True)
class ImageTree:
    """The image paths of a ``<domain>/<class>/<image>`` tree, grouped by (class, domain) cell."""

    root: Path
    cells: dict[tuple[str, str], tuple[str, ...]]

    @property
    def domains(self) -> tuple[str, ...]:
        """All domain names, sorted."""
        return tuple(sorted({d for _, d in self.cells}))

    @property
    def classes(self) -> tuple[str, ...]:
        """All class names, sorted."""
        return tuple(sorted({c for c, _ in self.cells}))

    def domains_of(self, cls: str) -> tuple[str, ...]:
        """The domains holding at least one image of class `cls`, sorted."""
        return tuple(sorted(d for c, d in self.cells if c == cls))

    def images(self, cls: str, domain: str) -> tuple[str, ...]:
        """Relative paths of the images of the (cls, domain) cell, sorted; empty if absent."""
        return self.cells.get((cls, domain), ())

    def common_domains(self) -> tuple[str, ...]:
        """Domains present for every class, sorted."""
        shared = set(self.domains)
        for cls in self.classes:
            shared &= set(self.domains_of(cls))
        return tuple(sorted(shared))


def scan_tree(root: str | Path) -> ImageTree:
    """List the images of a ``<domain>/<class>/<image>`` tree (hidden files are skipped).

    Raises OodevalError when the folder is missing or holds no images in that layout.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise OodevalError(
            f"image tree not found: {root}; give a folder laid out <domain>/<class>/<image>"
        )
    cells: dict[tuple[str, str], tuple[str, ...]] = {}
    for dom in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for cls in sorted(p for p in dom.iterdir() if p.is_dir() and not p.name.startswith(".")):
            files = sorted(
                f"{dom.name}/{cls.name}/{f.name}"
                for f in cls.iterdir()
                if f.is_file() and not f.name.startswith(".") and f.suffix.lower() in IMAGE_SUFFIXES
            )
            if files:
                cells[(cls.name, dom.name)] = tuple(files)
    if not cells:
        raise OodevalError(f"no images found under {root}; expected <domain>/<class>/<image> files")
    tree = ImageTree(root, cells)
    refuse_lookalikes(tree.domains, "domain", str(root))
    refuse_lookalikes(tree.classes, "class", str(root))
    return tree


def class_rng(seed: int, cls: str, stream: int = 0) -> np.random.Generator:
    """A generator depending only on (seed, class name, stream): adding classes changes nothing."""
    return np.random.default_rng([int(seed), zlib.crc32(cls.encode("utf-8")), stream])


def sample_cell(
    tree: ImageTree, cls: str, domain: str, count: int | None, rng: np.random.Generator, why: str
) -> list[str]:
    """All images of a cell (count None) or `count` of them drawn without replacement.

    Raises OodevalError naming the cell when it holds fewer than `count` images (or none).
    """
    files = tree.images(cls, domain)
    need = 1 if count is None else count
    if len(files) < need:
        raise OodevalError(
            f"cell (class={cls}, domain={domain}) has {len(files)} image(s) but {why} needs "
            f"{need}; lower the per-domain count or drop the domain"
        )
    if count is None:
        return list(files)
    picked = rng.choice(len(files), size=count, replace=False)
    return [files[i] for i in sorted(picked)]


def with_validation(
    rows: list[AssignmentRow], val_fraction: float, seed: int
) -> list[AssignmentRow]:
    """Move round(val_fraction * n) training images of every (class, domain) cell to role "val".

    The draw is seeded per class, so the assignment is reproducible.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise OodevalError(f"val_fraction must be in [0, 1), got {val_fraction}")
    if val_fraction == 0.0:
        return rows
    by_cell: dict[tuple[str, str], list[int]] = {}
    for i, row in enumerate(rows):
        if row.role == "train":
            by_cell.setdefault((row.cls, row.domain), []).append(i)
    out = list(rows)
    for (cls, domain), idx in sorted(by_cell.items()):
        rng = class_rng(seed, f"{cls}/{domain}", stream=1)
        n_val = int(round(val_fraction * len(idx)))
        for j in rng.choice(len(idx), size=n_val, replace=False):
            r = out[idx[j]]
            out[idx[j]] = AssignmentRow(r.path, r.cls, r.domain, "val")
    return out


def check_domains(tree: ImageTree, names: Sequence[str], what: str) -> tuple[str, ...]:
    """Return `names` as a tuple after checking they are distinct domains of the tree."""
    return check_domain_names(names, tree.domains, what, where="the tree")


def write_assignment_csv(rows: Iterable[AssignmentRow], path: str | Path) -> int:
    """Write the assignment as CSV (columns path,class,domain,role); return the number of rows."""
    n = 0
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        writer.writerow((row.path, row.cls, row.domain, row.role))
        n += 1
    write_file(path, text.getvalue())  # never through a symbolic link (`oodeval._files`)
    return n


def read_assignment_csv(path: str | Path) -> list[AssignmentRow]:
    """Read an assignment CSV written by `write_assignment_csv`, checking header and roles."""
    text = read_text(
        path, what="domain-assignment CSV", save_as="UTF-8 CSV (as `oodeval protocols` writes)"
    )
    with io.StringIO(text, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header) != CSV_COLUMNS:
            raise OodevalError(
                f"{path}: expected the header {','.join(CSV_COLUMNS)}, got "
                f"{'nothing' if header is None else listing(header, sep=',')}; "
                "use a file written by `oodeval protocols`"
            )
        rows = []
        lines = []
        for line_no, rec in enumerate(reader, start=2):
            if not rec:
                continue
            if len(rec) != 4:
                raise OodevalError(f"{path}: line {line_no} has {len(rec)} fields, expected 4")
            if rec[3] not in ROLES:
                raise OodevalError(
                    f"{path}: line {line_no} has role {rec[3]!r}; roles are {', '.join(ROLES)}"
                )
            rows.append(AssignmentRow(*rec))
            lines.append(f"line {line_no}")
    refuse_repeated_images(rows, where=str(path), places=lines)
    refuse_lookalikes(dict.fromkeys(r.domain for r in rows), "domain", str(path))
    refuse_lookalikes(dict.fromkeys(r.cls for r in rows), "class", str(path))
    return rows


def refuse_repeated_images(
    rows: Sequence[AssignmentRow], *, where: str = "rows", places: Sequence[str] | None = None
) -> None:
    """Refuse an image listed twice in the assignment `rows`: a repeated test row counts its
    image twice; one image in two roles (train and test) is seen in training and then scored as
    unseen. `places` names each row in the message (``line 7`` of a CSV; default ``rows[i]``).

    >>> rows = [AssignmentRow("a/x/1", "x", "a", "train"), AssignmentRow("a/x/1", "x", "a", "test")]
    >>> refuse_repeated_images(rows)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    oodeval.errors.OodevalError: rows: image 'a/x/1' is listed as train (rows[0]) and as test ...
    """
    seen: dict[str, int] = {}  # image path -> index of its first row
    for i, row in enumerate(rows):
        first = seen.setdefault(row.path, i)
        if first == i:
            continue
        at, before = (places[i], places[first]) if places else (f"rows[{i}]", f"rows[{first}]")
        role = rows[first].role
        if role == row.role:
            raise OodevalError(
                f"{where}: {at} repeats the {role} image {row.path!r} of {before}; "
                "list each image once"
            )
        raise OodevalError(
            f"{where}: image {row.path!r} is listed as {role} ({before}) and as {row.role} "
            f"({at}); give each image one role, or the {row.role} score measures an image the "
            f"model saw as {role}"
        )


def role_counts(rows: Sequence[AssignmentRow]) -> list[dict[str, int | str]]:
    """Summary per role: images, classes, domains and (class, domain) cells, plus a total row.

    >>> rows = [AssignmentRow("a/x/1.png", "x", "a", "train"),
    ...         AssignmentRow("b/x/2.png", "x", "b", "test")]
    >>> [r["images"] for r in role_counts(rows)]
    [1, 1, 2]
    """
    out: list[dict[str, int | str]] = []
    groups = [(role, [r for r in rows if r.role == role]) for role in ROLES]
    groups.append(("total", list(rows)))
    for role, members in groups:
        if role != "total" and not members:
            continue
        out.append(
            {
                "role": role,
                "images": len(members),
                "classes": len({r.cls for r in members}),
                "domains": len({r.domain for r in members}),
                "cells": len({(r.cls, r.domain) for r in members}),
            }
        )
    return out
