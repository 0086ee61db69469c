"""SPEC strings naming the training and test sets of `oodeval shift` (``--train``, ``--test``).

A SPEC is ``KIND[:LOCATION][:key=value]...``:

- an image source of `oodeval.environments.load_source`: ``digits``, ``mnist:DIR``,
  ``cifar10:DIR``, ``classfolder:DIR`` or ``folder:DIR`` (a ``<domain>/<class>/<image>`` tree);
  ``folder:DIR:domain=photo`` keeps one domain, ``domain=photo+sketch`` several;
- frozen features: ``npz:FILE`` with arrays ``features`` (n, d) and ``labels`` (n,) (read with
  ``allow_pickle=False``), for the MLP hypothesis class;
- one environment of a scenario family of `oodeval.environments.build_scenario`, e.g.
  ``sr-cmnist:e=0.1`` or ``cmnist:env=e=0.90``: ``e=VALUE`` or ``env=NAME`` picks the environment;
  ``role=eval`` looks only among the evaluation environments E_all (built from held-out images),
  ``role=given`` only among the given (training) environments. Without ``role=`` an evaluation
  environment of that name is taken, else the given one, so a given environment whose name is
  also in E_all (``sr-cmnist:e=0.1``) needs ``role=given``. ``images=SOURCE`` names the base
  images (default ``digits``); any other ``key=value`` is passed to the family (``ratio=3:1``).

``size=N`` resizes images to N x N (sources) or is passed to the family; ``seed=N`` seeds the
scenario and the ``max_samples`` subsample. A value may contain
colons (``ratio=3:1``, ``images=mnist:/data/mnist``): a piece without ``=`` continues the previous
value. When the two sets draw on the same images of one source (the same environment twice,
or environments of scenarios over that source re-rendered from the same held-out digits, whatever
their family parameters), every shared image is assigned to exactly one side by a seeded coin, so
the two sets never hold the same image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

from oodeval._npz import read_npz
from oodeval.environments.sources import SOURCE_KINDS
from oodeval.errors import OodevalError, listing

SCENARIO_KEYS: tuple[str, ...] = ("e", "env", "images", "seed", "role")
ROLES: tuple[str, ...] = ("eval", "given")


@dataclass(frozen=True)
class Spec:
    """A parsed SPEC: the kind, the folder (sources only) and the key=value options."""

    text: str
    kind: str
    location: str = ""
    params: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ShiftSet:
    """Labelled images of one side of a shift comparison.

    `pool` names the images the rows come from and `rows` their indices there, so two sets that
    share images can be made disjoint (`disjoint_pair`).
    """

    name: str
    images: np.ndarray
    labels: np.ndarray
    num_classes: int
    pool: str
    rows: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def subset(self, keep: np.ndarray) -> ShiftSet:
        """The rows selected by the index array `keep` (sorted)."""
        keep = np.sort(np.asarray(keep, dtype=np.int64))
        return ShiftSet(
            self.name,
            self.images[keep],
            self.labels[keep],
            self.num_classes,
            self.pool,
            self.rows[keep],
        )


def parse_spec(text: str) -> Spec:
    """Parse a SPEC string into kind, location and options.

    >>> parse_spec("sr-cmnist:e=0.1:ratio=3:1").params
    {'e': '0.1', 'ratio': '3:1'}
    >>> s = parse_spec("folder:/data/pacs:domain=photo")
    >>> s.kind, s.location, s.params
    ('folder', '/data/pacs', {'domain': 'photo'})
    """
    if not isinstance(text, str) or not text.strip():
        raise OodevalError(
            f"a SPEC must be a non-empty string such as 'sr-cmnist:e=0.1', got {text!r}"
        )
    pieces = text.strip().split(":")
    kind = pieces[0].strip().lower()
    if not kind:
        raise OodevalError(f"SPEC {text!r} has no kind before the first ':'; e.g. 'mnist:DIR'")
    rest = pieces[1:]
    location = ""
    takes_location = (kind in SOURCE_KINDS and SOURCE_KINDS[kind].takes_folder) or kind == "npz"
    if takes_location and rest and "=" not in rest[0]:
        location, rest = rest[0], rest[1:]
    params: dict[str, str] = {}
    last: str | None = None
    for piece in rest:
        if "=" in piece:
            key, _, value = piece.partition("=")
            key = key.strip().lower()
            if not key:
                raise OodevalError(f"SPEC {text!r} has an option without a name: {piece!r}")
            if key in params:
                raise OodevalError(f"SPEC {text!r} sets {key!r} twice; keep one")
            params[key] = value.strip()
            last = key
        elif last is not None:
            params[last] += ":" + piece
        else:
            raise OodevalError(
                f"cannot read {piece!r} in SPEC {text!r}; options are key=value, e.g. 'e=0.1'"
            )
    return Spec(text.strip(), kind, location, params)


def load_spec(text: str, *, images: str = "digits", max_samples: int | None = None) -> ShiftSet:
    """Load the labelled images named by the SPEC `text`.

    Parameters
    ----------
    text : str
        The SPEC (see the module docstring).
    images : str
        Base image source for scenario families when the SPEC has no ``images=`` option.
    max_samples : int, optional
        Keep at most this many rows (a seeded uniform subsample, seed from the SPEC or 0).
    """
    spec = parse_spec(text)
    if spec.kind == "npz":
        out = _load_npz_spec(spec)
    elif spec.kind in SOURCE_KINDS:
        out = _load_source_spec(spec)
    else:
        out = _load_scenario_spec(spec, images)
    if max_samples is not None:
        if max_samples < 2:
            raise OodevalError(f"max_samples must be at least 2, got {max_samples}")
        if len(out) > max_samples:
            rng = np.random.default_rng([_int_option(spec, "seed", 0), 3])
            out = out.subset(rng.choice(len(out), size=max_samples, replace=False))
    return out


def disjoint_pair(
    source: ShiftSet, target: ShiftSet, *, seed: int = 0
) -> tuple[ShiftSet, ShiftSet]:
    """Make `source` and `target` share no image: each shared pool row goes to one side by a coin.

    Sets from different pools are returned unchanged.

    >>> a = ShiftSet("a", np.zeros((4, 1)), np.zeros(4, int), 2, "p", np.arange(4))
    >>> s, t = disjoint_pair(a, a, seed=0)
    >>> len(s) + len(t), bool(np.intersect1d(s.rows, t.rows).size)
    (4, False)
    """
    if source.pool != target.pool:
        return source, target
    shared = np.intersect1d(source.rows, target.rows)
    if shared.size == 0:
        return source, target
    coin = np.random.default_rng([seed, 5]).random(shared.size) < 0.5
    to_target = set(shared[coin].tolist())
    to_source = set(shared[~coin].tolist())
    keep_s = [i for i, r in enumerate(source.rows.tolist()) if r not in to_target]
    keep_t = [i for i, r in enumerate(target.rows.tolist()) if r not in to_source]
    return source.subset(np.asarray(keep_s)), target.subset(np.asarray(keep_t))


def _load_npz_spec(spec: Spec) -> ShiftSet:
    from pathlib import Path

    if not spec.location:
        raise OodevalError(f"SPEC {spec.text!r}: give the file, e.g. 'npz:features.npz'")
    unknown = set(spec.params) - {"seed"}
    if unknown:
        raise OodevalError(f"SPEC {spec.text!r}: npz takes no option {sorted(unknown)[0]!r}")
    path = Path(spec.location).expanduser()
    if path.is_dir():
        raise OodevalError(f"{path} is a folder; {spec.text!r} needs an .npz features file")
    if not path.is_file():
        raise OodevalError(f"features file not found: {path}; check the path in {spec.text!r}")
    arrays, found = read_npz(
        path,
        what="features file",
        example="np.savez(path, features=..., labels=...)",
        names=("features", "labels"),
    )
    if len(arrays) != 2:
        raise OodevalError(
            f"{path} must hold arrays 'features' (n, d) and 'labels' (n,), "
            f"found {listing(found) or 'none'}"
        )
    features, labels = arrays["features"], arrays["labels"]
    if features.ndim < 2 or labels.ndim != 1 or len(features) != len(labels):
        raise OodevalError(
            f"{path}: features must be (n, d) and labels (n,), got {features.shape} and "
            f"{labels.shape}"
        )
    if not np.issubdtype(labels.dtype, np.integer) or (labels.size and labels.min() < 0):
        raise OodevalError(f"{path}: labels must be integer class ids >= 0")
    num_classes = max(int(labels.max()) + 1 if labels.size else 2, 2)
    return ShiftSet(
        f"npz:{path}",
        np.asarray(features, dtype=np.float32),
        labels.astype(np.int64),
        num_classes,
        f"npz:{path.resolve()}",
        np.arange(len(labels), dtype=np.int64),
    )


def _load_source_spec(spec: Spec) -> ShiftSet:
    from oodeval.environments.sources import load_source

    unknown = set(spec.params) - {"domain", "size", "seed"}
    if unknown:
        raise OodevalError(
            f"SPEC {spec.text!r}: unknown option(s) {listing(sorted(unknown))}; "
            "image sources take domain=, size=, seed="
        )
    if "domain" in spec.params and spec.kind != "folder":
        raise OodevalError(f"SPEC {spec.text!r}: domain= needs a folder:DIR source")
    base = spec.kind + (f":{spec.location}" if spec.location else "")
    size = _int_option(spec, "size", None)
    src = load_source(base, size=size)
    rows = np.arange(len(src), dtype=np.int64)
    name = base
    if "domain" in spec.params:
        wanted = [d for d in spec.params["domain"].split("+") if d]
        missing = [d for d in wanted if d not in src.domain_names]
        if missing or not wanted:
            raise OodevalError(
                f"SPEC {spec.text!r}: domain {listing(missing, sep='+') or '(empty)'} not found; "
                f"available: {listing(src.domain_names)}"
            )
        ids = [src.domain_names.index(d) for d in wanted]
        assert src.domains is not None  # a source with domain names has domains
        rows = np.flatnonzero(np.isin(src.domains, ids))
        name = f"{base}:domain={'+'.join(wanted)}"
    return ShiftSet(
        name,
        src.images[rows],
        src.labels[rows],
        src.num_classes,
        src.name,
        rows,
    )


def _load_scenario_spec(spec: Spec, default_images: str) -> ShiftSet:
    from oodeval.environments import FAMILIES, build_scenario

    if spec.kind not in FAMILIES:
        raise OodevalError(
            f"unknown SPEC kind {spec.kind!r}; use an image source ({', '.join(SOURCE_KINDS)}) "
            f"or a scenario family ({', '.join(sorted(FAMILIES))})"
        )
    selectors = [k for k in ("e", "env") if k in spec.params]
    if len(selectors) != 1:
        raise OodevalError(
            f"SPEC {spec.text!r} must pick one environment with e=VALUE or env=NAME, "
            f"e.g. '{spec.kind}:e=0.1'"
        )
    role = spec.params.get("role")
    if role is not None and role not in ROLES:
        raise OodevalError(
            f"SPEC {spec.text!r}: role={role} is unknown; use role=eval (evaluation environments) "
            "or role=given (training environments)"
        )
    seed = _int_option(spec, "seed", 0)
    family_params: dict[str, Any] = {
        k: _number_or_text(v) for k, v in spec.params.items() if k not in SCENARIO_KEYS
    }
    source = spec.params.get("images", default_images)
    scenario = build_scenario(spec.kind, source=source, seed=seed, **family_params)
    key = selectors[0]
    wanted = spec.params[key]
    roles = {
        "eval": (list(scenario.all_names), scenario.evaluation),
        "given": (list(scenario.given_names), scenario.given),
    }
    for found_role in [role] if role else list(roles):
        names, envs = roles[found_role]
        hit = _matching_name(names, key, wanted)
        if hit is None:
            continue
        env = next(e for e in envs() if e.name == hit)
        # Rows are indices of the base images in the source, so environments of scenarios built
        # with other parameters (ratio, eval_fraction, ...) are made disjoint by the images they
        # really share, not by row numbers.
        return ShiftSet(
            f"{scenario.name}:{hit}" + (":role=given" if found_role == "given" else ""),
            np.asarray(env.images, dtype=np.float32),
            np.asarray(env.labels, dtype=np.int64),
            int(scenario.num_classes),
            str(scenario.params.get("source", source)),
            np.asarray(env.meta["indices"], dtype=np.int64),
        )
    names = list(scenario.given_names if role == "given" else scenario.all_names)
    shown = listing(names, shown=5)
    where = {"given": "given environments of ", "eval": "evaluation environments of "}
    raise OodevalError(
        f"SPEC {spec.text!r}: no environment {key}={wanted} in the {where.get(role or '', '')}"
        f"{scenario.name}; names look like {shown}"
    )


def _matching_name(names: list[str], key: str, wanted: str) -> str | None:
    """The environment name equal to `wanted` (env=) or to e=<same number> (e=)."""
    if key == "env":
        return wanted if wanted in names else None
    try:
        value = float(wanted)
    except ValueError:
        raise OodevalError(f"e= must be a number such as 0.1, got {wanted!r}") from None
    for name in names:
        head, _, tail = name.partition("=")
        if head.strip() == "e":
            try:
                if abs(float(tail) - value) < 1e-9:
                    return name
            except ValueError:
                continue
    return None


@overload
def _int_option(spec: Spec, key: str, default: int) -> int: ...
@overload
def _int_option(spec: Spec, key: str, default: None) -> int | None: ...
def _int_option(spec: Spec, key: str, default: int | None) -> int | None:
    if key not in spec.params:
        return default
    try:
        return int(spec.params[key])
    except ValueError:
        raise OodevalError(f"SPEC {spec.text!r}: {key}= must be an integer") from None


def _number_or_text(value: str) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            continue
    return value
