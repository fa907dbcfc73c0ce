"""One block of rows in, the model's outputs for its good rows out; bad rows are named or skipped."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rlx.batch.columns import Rows, decode
from rlx.batch.source import Block
from rlx.batch.spec import Signature, pick
from rlx.errors import DataError, RlxError, UsageError
from rlx.runtime import Model

ON_ERROR = ("stop", "skip")
# What a model call raises for rows it cannot take: a shape outside a symbol's range, mismatched
# symbols (InputError), an index out of range in an embedding (the runtime's RlxError wrapping
# numpy's IndexError). Anything else is a bug in rlx and propagates.
ROW_ERRORS = (RlxError,)


@dataclass(frozen=True)
class Skip:
    """Rows left out of the output, and why (one line of ``skipped.jsonl``)."""

    row_index: int
    count: int
    file: str
    file_row: int | None
    column: str | None
    error: str

    def message(self) -> str:
        if self.file_row is None:
            where = self.file
        elif self.count > 1:
            where = f"{self.file}: rows {self.file_row}..{self.file_row + self.count - 1}"
        else:
            where = f"{self.file}: row {self.file_row}"
        if self.file_row is not None and self.file_row != self.row_index:
            where += f" (dataset row {self.row_index})"
        return f"{where}, column {self.column!r}: {self.error}" if self.column else f"{where}: {self.error}"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)  # the fields, in order, are the line's keys


@dataclass
class Predicted:
    rows: list[int]  # block rows that have outputs, in order
    outputs: dict[str, np.ndarray | list[np.ndarray]]  # per output: stacked rows, or one array per row if ragged
    skipped: list[Skip]


class Predictor:
    """Runs blocks through a model: rows of one shape in one call, bad rows found and dealt with per ``on_error``."""

    def __init__(self, model: Model, sig: Signature, on_error: str = "stop") -> None:
        if on_error not in ON_ERROR:
            raise UsageError(f"on_error must be one of {', '.join(ON_ERROR)}, not {on_error!r}")
        self.model, self.sig, self.on_error = model, sig, on_error

    def block(self, block: Block) -> Predicted:
        if block.columns is None:  # the rows could not be read at all
            path, file_row = block.locate(0)
            column = block.origins[0][1].problem_column
            skip = self._bad(Skip(block.start, block.n, path, file_row, column, block.problem or "unreadable"))
            return Predicted([], {}, [skip])
        decoded = {spec.name: decode(block.columns[spec.column], spec) for spec in self.sig.inputs}
        skipped = [self._bad(self._skip(block, i, column, why)) for i, column, why in self._bad_rows(decoded)]
        bad = {s.row_index - block.start for s in skipped}
        results: list[tuple[list[int], dict[str, np.ndarray]]] = []
        for group in self._groups([i for i in range(block.n) if i not in bad], decoded):
            results += self._run_group(group, decoded, block, skipped)
        skipped.sort(key=lambda s: s.row_index)
        rows = [i for group, _ in results for i in group]  # ascending: groups are in order, and so is each
        return Predicted(rows, _merge([out for _, out in results], self.sig), skipped)

    def _bad_rows(self, decoded: dict[str, Rows]) -> list[tuple[int, str, str]]:
        """(block row, column, reason) for each row some input cannot use (the first such input names it)."""
        found: dict[int, tuple[str, str]] = {}
        for spec in self.sig.inputs:
            for i, why in decoded[spec.name].bad.items():
                found.setdefault(i, (spec.column, why))
        return [(i, column, why) for i, (column, why) in sorted(found.items())]

    def _groups(self, good: list[int], decoded: dict[str, Rows]) -> list[list[int]]:
        """Consecutive good rows of one shape go into one call (a static model: one row per call)."""
        groups: list[list[int]] = []
        last_key = None
        for i in good:
            key = tuple(decoded[spec.name].shape_of(i) for spec in self.sig.inputs)
            if groups and self.sig.batched and key == last_key and groups[-1][-1] == i - 1:
                groups[-1].append(i)
            else:
                groups.append([i])
            last_key = key
        return groups

    def _run_group(
        self, group: list[int], decoded: dict[str, Rows], block: Block, skipped: list[Skip]
    ) -> list[tuple[list[int], dict[str, np.ndarray]]]:
        try:
            return [(group, self._call(group, decoded))]
        except ROW_ERRORS as e:
            if len(group) == 1:
                skipped.append(self._bad(self._skip(block, group[0], None, f"the model refused it: {_one_line(e)}")))
                return []
        # One call failed: try each row alone to find the ones the model refuses, then run the rest
        # together again, so they are computed in one batch as they would be without the bad rows.
        for i in group:
            self._run_group([i], decoded, block, skipped)
        refused = {s.row_index - block.start for s in skipped}
        rest = [i for i in group if i not in refused]
        return [(rest, self._call(rest, decoded))] if rest else []

    def _call(self, group: list[int], decoded: dict[str, Rows]) -> dict[str, np.ndarray]:
        n = len(group)
        if not self.sig.batched:  # static model: one row is the whole input
            (i,) = group
            result = self.model(**{spec.name: decoded[spec.name].take([i])[0] for spec in self.sig.inputs})
            return {o.name: np.asarray(pick(result, o.path))[None] for o in self.sig.outputs}
        # A batch smaller than the batch symbol's minimum is padded with copies of its last row.
        padded = group + [group[-1]] * max(0, self.sig.min_batch - n)
        result = self.model(**{spec.name: decoded[spec.name].take(padded) for spec in self.sig.inputs})
        outputs = {}
        for o in self.sig.outputs:
            leaf = np.asarray(pick(result, o.path))
            if leaf.ndim == 0 or leaf.shape[0] != len(padded):
                raise UsageError(f"output {o.name!r} has shape {list(leaf.shape)} for {len(padded)} rows: not per row")
            outputs[o.name] = leaf[:n]
        return outputs

    def _skip(self, block: Block, i: int, column: str | None, why: str) -> Skip:
        path, file_row = block.locate(i)
        return Skip(block.start + i, 1, path, file_row, column, why)

    def _bad(self, skip: Skip) -> Skip:
        if self.on_error == "stop":
            raise DataError(skip.message())
        return skip


def _merge(parts: list[dict[str, np.ndarray]], sig: Signature) -> dict[str, Any]:
    """Per output: the groups' rows stacked, or a list of rows when their shapes differ (ragged)."""
    merged: dict[str, Any] = {}
    for o in sig.outputs:
        arrays = [p[o.name] for p in parts]
        if not arrays:
            merged[o.name] = []
        elif len({a.shape[1:] for a in arrays}) == 1:
            merged[o.name] = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
        else:
            merged[o.name] = [row for a in arrays for row in a]
    return merged


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__
