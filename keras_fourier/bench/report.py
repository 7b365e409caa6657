"""The bench's results: aligned text tables, and JSON and CSV files written atomically."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from typing import Any

from keras_fourier.fileio import atomic_write_bytes


def write_atomic(path: str, data: bytes) -> None:
    """Writes `data` to `path` atomically, creating its folder."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write_bytes(path, data)


def _csv_bytes(rows: Sequence[dict[str, Any]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=_columns(rows), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue().encode()


def write_results(out: str, stem: str, report: dict[str, Any]) -> list[str]:
    """Writes `report` as OUT/STEM.json and its rows as OUT/STEM.csv, atomically.

    Args:
        out: the folder (created if needed).
        stem: the files' name without extension ("bench", "scaling", ...).
        report: a JSON-serializable dict with a "rows" list of flat dicts.

    Returns:
        The paths written.
    """
    paths = [os.path.join(out, f"{stem}.json"), os.path.join(out, f"{stem}.csv")]
    write_atomic(paths[0], (json.dumps(report, indent=2) + "\n").encode())
    write_atomic(paths[1], _csv_bytes(report["rows"]))
    return paths


def rounded(figures: dict[str, Any]) -> dict[str, Any]:
    """Floats to 5 significant digits; other values unchanged."""
    return {k: float(f"{v:.5g}") if isinstance(v, float) else v for k, v in figures.items()}


def _columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    return columns


def _cell(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def format_row(row: dict[str, Any]) -> str:
    """A row as ``key=value`` pairs (None values left out), for progress lines."""
    return "  ".join(f"{key}={_cell(value)}" for key, value in row.items() if value is not None)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as an aligned text table, one column per key."""
    columns = _columns(rows)
    cells = [columns] + [[_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(text.rjust(width) for text, width in zip(line, widths, strict=True))
        for line in cells
    )
