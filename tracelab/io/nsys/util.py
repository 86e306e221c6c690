"""Hash-based distinct / factorize for big integer columns (numpy's unique sorts, which costs
seconds on millions of rows; pandas hashes in one pass)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values."""
    values = np.asarray(values)
    if not len(values):
        return values[:0]
    return np.sort(pd.unique(values))


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, index of each value in them)."""
    codes, uniques = pd.factorize(np.asarray(values), sort=False)
    return np.asarray(uniques), codes

