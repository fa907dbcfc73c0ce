"""Regression tests for what a fuzzer found in `rlx batch` (issue 29): each input either runs, with values
that match PyTorch, or is refused with one line naming the file (and column or row) — never a raw
pyarrow/numpy exception, never an exit 0 that wrote fewer rows than the input holds."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rlx.batch
from conftest import torch_outputs
from rlx.cli import main
from rlx.errors import DataError

N = 64


def features(n: int = N, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 6)).astype(np.float32)


def cli(capsys, *args: str) -> tuple[int, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.err


# ── accepted: inputs that used to fail raw ──────────────────────────────────
TENSOR_COLUMNS = {
    "bool fixed-shape tensor": lambda x: pa.FixedShapeTensorArray.from_numpy_ndarray(x > 0),
    "float16 fixed-shape tensor": lambda x: pa.FixedShapeTensorArray.from_numpy_ndarray(x.astype(np.float16)),
    "int8 fixed-shape tensor": lambda x: pa.FixedShapeTensorArray.from_numpy_ndarray((x * 10).astype(np.int8)),
    "bool lists": lambda x: pa.array([list(r) for r in x > 0]),
    "bool fixed-size lists": lambda x: pa.FixedSizeListArray.from_arrays(pa.array((x > 0).ravel()), 6),
}


@pytest.mark.parametrize("kind", list(TENSOR_COLUMNS), ids=list(TENSOR_COLUMNS))
def test_columns_of_other_numeric_types_run_and_match_torch(two_heads, tmp_path, kind):
    model, bundle = two_heads
    x = features()
    column = TENSOR_COLUMNS[kind](x)
    pq.write_table(pa.table({"features": column}), tmp_path / "d.parquet")
    summary = rlx.batch.run(bundle, tmp_path / "d.parquet", tmp_path / "out", batch_size=16)
    assert (summary.written, summary.skipped) == (N, 0)
    table = pq.read_table(tmp_path / "out")
    assert table.column("row_index").to_pylist() == list(range(N))
    # What the model saw: the column's values, converted to its float32 input.
    if "bool" in kind:
        seen = (x > 0).astype(np.float32)
    elif "float16" in kind:
        seen = x.astype(np.float16).astype(np.float32)
    else:
        seen = (x * 10).astype(np.int8).astype(np.float32)
    want = torch_outputs(model, seen)
    got = table.column("logits").combine_chunks().to_numpy_ndarray()
    np.testing.assert_allclose(got, want["logits"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(table.column("label").to_numpy(), want["label"])


def test_nulls_inside_a_tensor_column_are_skipped_row_by_row(two_heads, tmp_path):
    _, bundle = two_heads
    x = features(4)
    values = pa.array(x.ravel(), mask=np.arange(24) == 9)  # row 1, element 3
    storage = pa.FixedSizeListArray.from_arrays(values, 6)
    column = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(pa.float32(), [6]), storage)
    pq.write_table(pa.table({"features": column}), tmp_path / "d.parquet")
    with pytest.raises(DataError, match=r"d\.parquet: row 1, column 'features': holds nulls"):
        rlx.batch.run(bundle, tmp_path / "d.parquet", tmp_path / "out")
    summary = rlx.batch.run(bundle, tmp_path / "d.parquet", tmp_path / "out", on_error="skip")
    assert (summary.written, summary.skipped) == (3, 1)
    assert pq.read_table(tmp_path / "out").column("row_index").to_pylist() == [0, 2, 3]


# ── refused in one line ──────────────────────────────────────────────────────
def duplicate_input(tmp_path):
    x = features()
    table = pa.Table.from_arrays([pa.array(list(x)), pa.array(list(x))], names=["features", "features"])
    pq.write_table(table, tmp_path / "d.parquet")
    return tmp_path / "d.parquet", "d.parquet: rows 0..63, column 'features': column 'features' appears 2 times"


def duplicate_carried(tmp_path):
    x = features()
    table = pa.Table.from_arrays([pa.array(list(x)), pa.array(range(N)), pa.array(range(N))], ["features", "id", "id"])
    pq.write_table(table, tmp_path / "d.parquet")
    return tmp_path / "d.parquet", "column 'id': column 'id' appears 2 times; rename all but one"


def npy_damaged(offset: int, junk: bytes):
    def make(tmp_path):
        np.save(tmp_path / "x.npy", features())
        raw = bytearray((tmp_path / "x.npy").read_bytes())
        raw[offset : offset + len(junk)] = junk
        (tmp_path / "x.npy").write_bytes(bytes(raw))
        return tmp_path / "x.npy", "x.npy: not a readable .npy file: "

    return make


def npy_truncated(tmp_path):
    np.save(tmp_path / "x.npy", features())
    (tmp_path / "x.npy").write_bytes((tmp_path / "x.npy").read_bytes()[:300])
    return tmp_path / "x.npy", "x.npy: not a readable .npy file: "


def npy_scalar(tmp_path):
    np.save(tmp_path / "x.npy", np.float32(1.0))
    return tmp_path / "x.npy", "x.npy: column 'features' is a single value, not rows"


def npz_damaged(tmp_path):
    np.savez_compressed(tmp_path / "d.npz", features=features())
    raw = bytearray((tmp_path / "d.npz").read_bytes())
    raw[80:120] = b"\x00" * 40
    (tmp_path / "d.npz").write_bytes(bytes(raw))
    return tmp_path / "d.npz", "d.npz: not a readable .npz file: "


def npz_lengths_differ(tmp_path):
    np.savez(tmp_path / "d.npz", features=features(), id=np.arange(N - 1))
    return tmp_path / "d.npz", "d.npz: columns differ in length: features 64, id 63"


def carried_complex(tmp_path):
    np.savez(tmp_path / "d.npz", features=features(), z=np.ones(N, dtype=np.complex64))
    return tmp_path / "d.npz", "d.npz: carried column 'z' cannot be written to Parquet"


REFUSED = {
    "duplicated input column": duplicate_input,
    "duplicated carried column": duplicate_carried,
    "npy header unbalanced": npy_damaged(20, b"(((((((((("),
    "npy header not a dict": npy_damaged(10, b"[1, 2, 3]  "),
    "npy header bad dtype": npy_damaged(22, b"'<q9'"),
    "npy magic damaged": npy_damaged(0, b"\x00NUMPZ"),
    "npy truncated": npy_truncated,
    "npy holds one value": npy_scalar,
    "npz damaged": npz_damaged,
    "npz columns of different lengths": npz_lengths_differ,
    "carried column of complex numbers": carried_complex,
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_bad_data_is_refused_in_one_line_naming_the_file(two_heads, tmp_path, capsys, case):
    data, message = REFUSED[case](tmp_path)
    code, err = cli(capsys, "batch", two_heads[1], "-i", data, "-o", tmp_path / "out")
    assert code == 2 and err.startswith(f"rlx: {tmp_path}") and err.count("\n") == 1 and message in err, err
    assert "internal error" not in err
    assert not (tmp_path / "out").exists()


# ── arguments: validated where they are parsed ──────────────────────────────
BAD_COUNTS = [
    ("batch", "--shard-rows", "0"),
    ("batch", "--shard-rows", "-5"),
    ("batch", "--batch-size", "0"),
    ("batch", "--batch-size", "1.5"),
    ("batch", "--batch-size", "99999999999999999999"),
    ("batch", "--workers", "0"),
    ("run", "--threads", "0"),
    ("run", "--threads", "-1"),
    ("bench", "--threads", "0"),
    ("bench", "--runs", "0"),
    ("bench", "--warmup", "-1"),
    ("bench", "--batch", "0"),
    ("debug", "--top", "0"),
    ("debug", "--top", "x"),
]
POSITIONAL = {"batch": ["B", "-i", "D", "-o", "O"], "run": ["B"], "bench": ["B"], "debug": ["O"]}


@pytest.mark.parametrize("command,flag,value", BAD_COUNTS, ids=[" ".join(c) for c in BAD_COUNTS])
def test_a_bad_count_exits_2_in_one_line_before_any_work(tmp_path, capsys, monkeypatch, command, flag, value):
    monkeypatch.chdir(tmp_path)
    code, err = cli(capsys, command, *POSITIONAL[command], flag, value)
    assert code == 2
    assert err == f"rlx: rlx {command}: argument {flag}: must be a whole number from " + (
        f"{0 if flag == '--warmup' else 1} to {4096 if flag in ('--threads', '--workers') else 2**31 - 1:,}, "
        f"not {value!r} (see --help)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_shard_rows_below_one_is_refused_by_the_api_too(two_heads, tmp_path):
    np.save(tmp_path / "x.npy", features())
    for bad in (0, -5):
        with pytest.raises(rlx.errors.UsageError, match=f"shard rows must be a whole number of at least 1, not {bad}"):
            rlx.batch.run(two_heads[1], tmp_path / "x.npy", tmp_path / "out", shard_rows=bad, batch_size=1)
    assert not (tmp_path / "out").exists()


def test_tiny_shards_write_every_row(two_heads, tmp_path, capsys):
    """`--shard-rows 5 --batch-size 1` (the shape of the fuzzer's `-5` case, made valid): all 64 rows."""
    np.save(tmp_path / "x.npy", features())
    code, _ = cli(capsys, "batch", two_heads[1], "-i", tmp_path / "x.npy", "-o", tmp_path / "out",
                  "--shard-rows", "5", "--batch-size", "1")  # fmt: skip
    assert code == 0
    assert pq.read_table(tmp_path / "out").column("row_index").to_pylist() == list(range(N))
    assert json.loads((tmp_path / "out" / "_manifest.json").read_text())["total_rows"] == N


# ── carried columns whose type differs between files (fuzzer, seed 1004124: exit 0, unreadable output) ──
CARRIED_TYPES = {
    "null then string": (pa.nulls(3), pa.array(["a", "b", "c"]), pa.string()),
    "int32 then int64": (pa.array([1, 2, 3], pa.int32()), pa.array([4, 5, 6], pa.int64()), pa.int64()),
    "string then null": (pa.array(["a", None, "c"]), pa.nulls(3), pa.string()),
    "struct then list": (pa.array([{"a": 1}] * 3), pa.array([[None]] * 3), None),
}


@pytest.mark.parametrize("case", list(CARRIED_TYPES), ids=list(CARRIED_TYPES))
def test_a_carried_column_gets_one_type_in_every_shard_or_is_refused(two_heads, tmp_path, case):
    first, second, unified = CARRIED_TYPES[case]
    (tmp_path / "data").mkdir()
    x = features(6)
    for k, carried in enumerate((first, second)):
        table = pa.table({"features": pa.array(list(x[3 * k : 3 * k + 3])), "note": carried})
        pq.write_table(table, tmp_path / "data" / f"p{k}.parquet")
    run = lambda **kw: rlx.batch.run(two_heads[1], tmp_path / "data", tmp_path / "out", shard_rows=3, **kw)  # noqa: E731
    if unified is None:
        with pytest.raises(DataError) as err:
            run()
        assert str(err.value).startswith(
            f"{tmp_path / 'data' / 'p1.parquet'}: rows 0..2 (dataset row 3), column 'note': "
        )
        assert "a carried column needs one type in every file (or leave it out with --keep)" in str(err.value)
        summary = run(on_error="skip")
        assert (summary.written, summary.skipped) == (3, 3)
    else:
        summary = run()
        assert summary.written == 6
    table = pq.read_table(tmp_path / "out")  # every shard has one schema: the directory reads as one table
    assert table.column("row_index").to_pylist() == list(range(summary.written))
    if unified is not None:
        assert table.schema.field("note").type == unified
        assert table.column("note").to_pylist() == first.cast(unified).to_pylist() + second.cast(unified).to_pylist()


def test_a_one_row_shard_of_a_static_model_is_written(static, tmp_path):
    """Fuzzer seeds 3 and 86: one row's output, ``out[None]``, has a zero stride Arrow's tensors refused."""
    model, bundle = static
    x = np.random.default_rng(3).standard_normal((3, 2, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    summary = rlx.batch.run(bundle, tmp_path / "x.npy", tmp_path / "out", shard_rows=1, batch_size=1)
    assert (summary.written, summary.shards_written) == (3, 3)
    got = pq.read_table(tmp_path / "out").column("output").combine_chunks().to_numpy_ndarray()
    want = np.stack([torch_outputs(model, row)["output"] for row in x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "error",
    [pa.ArrowNotImplementedError("Integers not in cstdint are not implemented"), pa.ArrowInvalid("bad"),
     pa.ArrowTypeError("bad"), OSError("Couldn't deserialize thrift")],
    ids=lambda e: type(e).__name__,
)  # fmt: skip
def test_any_arrow_error_from_a_damaged_footer_is_one_line(two_heads, tmp_path, monkeypatch, error):
    """Fuzzer seed 773: a flipped footer byte made read_metadata raise ArrowNotImplementedError, uncaught."""
    pq.write_table(pa.table({"features": pa.array(list(features(4)))}), tmp_path / "d.parquet")

    def damaged(*args, **kwargs):
        raise error

    monkeypatch.setattr(pq, "read_metadata", damaged)
    with pytest.raises(DataError) as err:
        rlx.batch.run(two_heads[1], tmp_path / "d.parquet", tmp_path / "out")
    assert str(err.value).startswith(f"{tmp_path / 'd.parquet'}: not a readable Parquet file: ")
    assert "\n" not in str(err.value)


def test_a_row_group_holding_fewer_rows_than_its_footer_lists_is_named(two_heads, tmp_path, monkeypatch):
    """Fuzzer seed 1016005: a damaged file whose row group read as 0 rows, its footer 4; the run exited 0
    having written 4 of 8 rows. Simulated here: the reader stops after the first batch of each group."""
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"features": pa.array(list(features(8)))}), path, row_group_size=4)
    real = pq.ParquetFile.iter_batches

    def short(self, *args, **kwargs):
        yield next(iter(real(self, *args, **kwargs)))

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", short)
    with pytest.raises(DataError) as err:
        rlx.batch.run(two_heads[1], path, tmp_path / "out", batch_size=2)
    assert str(err.value) == f"{path}: rows 2..3: row group 0 holds 2 rows, its footer lists 4"
    summary = rlx.batch.run(two_heads[1], path, tmp_path / "out", batch_size=2, on_error="skip")
    assert (summary.written, summary.skipped) == (4, 4)
    assert pq.read_table(tmp_path / "out").column("row_index").to_pylist() == [0, 1, 4, 5]
