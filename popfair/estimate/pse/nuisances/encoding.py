"""The SFM roles of a scored table as numbers for DML-UCA: float32 blocks per role, the 0/1
treatment, the outcome, clusters (`NumericRoles`), and the stratified cross-fitting folds."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from popfair.core.errors import EstimationError
from popfair.core.types import Roles

# Feature blocks of each nuisance (b, r, x, z); "x" is the 0/1 indicator of X = x1.
FEATURE_SETS = {"mu3": "brxz", "mu2": "rxz", "mu1": "xz", "p_z": "z", "p_rz": "rz", "p_brz": "brz"}
# A nuisance's rows are fit as weighted distinct rows (`NumericRoles.groups`) when at most this share is distinct.
GROUPED_SHARE = 0.75


@dataclass
class NumericRoles:
    """Numeric blocks of the SFM roles (float32), the 0/1 treatment indicator, outcome and clusters."""

    blocks: dict[str, np.ndarray]
    a: np.ndarray
    y: np.ndarray
    cluster: np.ndarray | None
    _factual: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _groups: dict[tuple[str, int], np.ndarray | None] = field(default_factory=dict, repr=False)
    _levels: dict[str, tuple[list[np.ndarray], np.ndarray]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_frame(
        cls, data: pd.DataFrame, sfm: Roles, y: str, *, cluster: str | None, max_categories: int
    ) -> tuple[NumericRoles, int, list[str]]:
        if not isinstance(data, pd.DataFrame):
            raise EstimationError(f"data must be a pandas DataFrame, got {type(data).__name__}")
        x, x0, x1 = sfm.x, sfm.x0, sfm.x1
        roles = {"z": list(sfm.z), "b": list(sfm.b), "r": list(sfm.r)}
        for role in ("b", "r"):
            if not roles[role]:
                raise EstimationError(f"role {role} is empty; the B/R decomposition needs at least one column each")
        named = [x, y] + roles["z"] + roles["b"] + roles["r"] + ([cluster] if cluster else [])
        missing = [c for c in dict.fromkeys(named) if c not in data.columns]
        if missing:
            raise EstimationError(f"data lacks columns {missing} (has {list(data.columns)})")
        seen: dict[str, str] = {}
        for role, cols in [("x", [x]), ("y", [y])] + list(roles.items()):
            for col in cols:
                if col in seen:
                    raise EstimationError(
                        f"column {col!r} is given both as {seen[col]} and as {role}; each column plays one role"
                    )
                seen[col] = role
        if x0 == x1:
            raise EstimationError(f"x0 and x1 must differ, both are {x0!r}")
        present = data[x].astype(object).where(data[x].isna(), data[x].astype(str))  # levels compared as text
        levels = sorted(map(str, present.dropna().unique()))
        for level in (x0, x1):
            if not (present == level).any():
                raise EstimationError(
                    f"{x} has no rows with level {level!r} (levels present: {levels}); "
                    "both contrasted levels are needed"
                )
        outcome = pd.to_numeric(data[y], errors="coerce") if data[y].dtype != bool else data[y].astype(float)
        if data[y].notna().sum() != outcome.notna().sum():
            raise EstimationError(f"outcome {y!r} has non-numeric values; expected a 0-100 score or a 0/1 callback")
        keep = present.isin([x0, x1]) & outcome.notna()
        rows = data.loc[keep]
        n_excluded = int((~keep).sum())
        yv = outcome[keep].to_numpy(dtype=float)
        if not np.isfinite(yv).all():
            raise EstimationError(f"outcome {y!r} has infinite values")
        if len(yv) == 0 or np.ptp(yv) == 0:
            raise EstimationError(
                f"outcome {y!r} is constant ({yv[0] if len(yv) else 'no rows'}) over the "
                f"{len(yv)} rows with {x} in ({x0!r}, {x1!r}); there is no effect to decompose"
            )
        role_cols = roles["z"] + roles["b"] + roles["r"] + ([cluster] if cluster else [])
        nan_cols = [c for c in role_cols if rows[c].isna().any()]
        if nan_cols:
            counts = {c: int(rows[c].isna().sum()) for c in nan_cols}
            raise EstimationError(f"role columns have missing values {counts}; impute them or drop those rows")
        notes: list[str] = []
        blocks = {}
        for role, cols in roles.items():
            parts = [_encode_column(rows[c], max_categories, notes) for c in cols]
            blocks[role] = (
                np.column_stack(parts).astype(np.float32) if parts else np.zeros((len(rows), 1), np.float32)
            )  # empty Z: intercept-only models
        a = (present[keep] == x1).to_numpy(dtype=np.float32)
        blocks["x"] = a[:, None]
        clusters = pd.factorize(rows[cluster])[0] if cluster else None
        if clusters is not None and clusters.max() + 1 < 2:
            raise EstimationError(f"cluster column {cluster!r} has a single cluster; need at least 2")
        return cls(blocks=blocks, a=a.astype(int), y=yv, cluster=clusters), n_excluded, notes

    def features(self, name: str, a_value: int | None = None) -> np.ndarray:
        """Feature matrix of nuisance `name`, with X set to `a_value` when given (counterfactual).
        The factual matrices are built once and shared (read-only) by every fit."""
        if a_value is None:
            cached = self._factual.get(name)
            if cached is None:
                cached = self._factual[name] = self._stack(name, None)
                cached.flags.writeable = False
            return cached
        return self._stack(name, a_value)

    def groups(self, name: str, max_bin: int, rows: np.ndarray | None = None) -> np.ndarray | None:
        """A code per row of nuisance `name`'s factual features, equal for identical rows (0..G-1), when
        aggregating them pays and cannot change a fit: at most `GROUPED_SHARE` of the rows are
        distinct and no column has more than `max_bin` distinct values (so XGBoost's histogram cuts
        are every distinct value, weighted or not). None otherwise. Identical rows fall in the same
        leaf of every tree: one row per distinct feature vector, weighted by its count and labelled
        with the mean target, gives every node the same gradient and hessian sums as the rows do.
        With `rows`: the codes of those rows only."""
        key = (name, max_bin)
        if key not in self._groups:
            features = self.features(name)
            whole = np.ascontiguousarray(features).view(
                np.dtype((np.void, features.dtype.itemsize * features.shape[1]))
            )
            _, codes = np.unique(whole.ravel(), return_inverse=True)
            few_rows = codes.max(initial=0) + 1 <= GROUPED_SHARE * len(codes)
            few_values = few_rows and all(
                len(values) <= max_bin for block in FEATURE_SETS[name] for values in self._block_levels(block)[0]
            )
            self._groups[key] = codes.astype(np.intp) if few_values else None
        found = self._groups[key]
        return found if found is None or rows is None else found[rows]

    def levels(self, name: str, max_bin: int, rows: np.ndarray | None = None) -> list[np.ndarray] | None:
        """Each column's distinct values in nuisance `name`'s factual features, when no column has
        more than `max_bin` and `rows` (default: all) hold every one of them: XGBoost's histogram
        cuts of those rows are then exactly these values, whatever the rows' weights
        (`nuisances.cut_ref`). None otherwise."""
        levels, present = [], []
        for block in FEATURE_SETS[name]:
            values, codes = self._block_levels(block)
            if any(len(v) > max_bin for v in values):
                return None
            if rows is not None:
                present.append(np.bincount(codes[rows].ravel(), minlength=sum(map(len, values))).all())
            levels += values
        return levels if all(present) else None

    def _block_levels(self, block: str) -> tuple[list[np.ndarray], np.ndarray]:
        """A role block's distinct values per column, and its rows' value codes (offset per column,
        so one bincount of a row subset counts every column's values at once)."""
        if block not in self._levels:
            values, codes, offset = [], [], 0
            for column in self.blocks[block].T:
                distinct, code = np.unique(column, return_inverse=True)
                values.append(distinct)
                codes.append(code.astype(np.int32) + offset)
                offset += len(distinct)
            self._levels[block] = (values, np.column_stack(codes))
        return self._levels[block]

    def _stack(self, name: str, a_value: int | None) -> np.ndarray:
        parts = []
        for block in FEATURE_SETS[name]:
            if block == "x" and a_value is not None:
                parts.append(np.full((len(self.y), 1), a_value, np.float32))
            else:
                parts.append(self.blocks[block])
        return np.hstack(parts)


def _encode_column(column: pd.Series, max_categories: int, notes: list[str]) -> np.ndarray:
    """Numeric columns as floats; strings/categories/bools one-hot over the most frequent levels."""
    if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
        return column.to_numpy(dtype=np.float32)[:, None]
    text = column.astype(str)
    counts = text.value_counts()
    levels = sorted(counts.index)
    if len(levels) > max_categories:
        kept = set(counts.sort_values(ascending=False, kind="stable").index[: max_categories - 1])
        notes.append(
            f"{column.name}: {len(levels)} levels; kept the {max_categories - 1} most frequent and "
            f"pooled the other {len(levels) - len(kept)} as 'other' (group high-cardinality columns "
            "first, as the paper's C.4 does)"
        )
        levels = sorted(kept)
        text = text.where(text.isin(kept), "\x00other")
        levels.append("\x00other")
    codes = pd.Categorical(text, categories=levels).codes
    return (codes[:, None] == np.arange(len(levels))[None, :]).astype(np.float32)


def assign_folds(
    a: np.ndarray, folds: int, seed: int, *, x: str, levels: tuple[str, str], split: int = 0
) -> np.ndarray:
    """Fold id per row, stratified by X so every fold holds both levels when that is possible;
    `split` numbers the fold assignments of repeated cross-fitting (0: the single-split one)."""
    rng = np.random.default_rng([seed, 1] if split == 0 else [seed, 1, split])
    fold_of = np.empty(len(a), dtype=int)
    for value in (0, 1):
        idx = np.flatnonzero(a == value)
        fold_of[rng.permutation(idx)] = (np.arange(len(idx)) + rng.integers(folds)) % folds
    for value, level in zip((0, 1), levels):
        present = np.bincount(fold_of[a == value], minlength=folds)
        if (present == 0).any():
            empty = np.flatnonzero(present == 0).tolist()
            raise EstimationError(
                f"cross-fitting folds {empty} of {folds} have no rows with {x}={level!r} (only "
                f"{int((a == value).sum())} such rows); every fold needs both levels: lower `folds` or add data"
            )
    return fold_of
