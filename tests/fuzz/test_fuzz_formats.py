"""Property-based fuzzing of every file rlx reads: torch-ir.json, program.json, meta.json and
safetensors headers. Whatever the mutation, the only exception allowed out is an ``RlxError``,
and each case must finish quickly.

CI runs a bounded number of examples; a longer run:
    RLX_FUZZ_EXAMPLES=5000 python -m pytest tests/fuzz -p no:cacheprovider
Crashers found are kept in ``tests/fuzz/corpus/`` and replayed as regression cases.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlx
from rlx.app.convert import build_program
from rlx.errors import RlxError
from rlx.formats import torch_ir
from rlx.formats.bundle import bind_weights
from rlx.ir.dtypes import to_numpy
from rlx.runtime.model import Model

from helpers import convert_example

EXAMPLES = int(os.environ.get("RLX_FUZZ_EXAMPLES", "120"))
CORPUS = Path(__file__).parent / "corpus"
TIME_LIMIT_S = 5.0
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # the time bound is asserted per case below, with a clearer message
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=os.environ.get("RLX_FUZZ_RANDOM") is None,  # reproducible in CI
)


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    """A real conversion to mutate: the transformer example (attention, norms, masks)."""
    return convert_example(tmp_path_factory, "transformer")[0]


# ── mutations ────────────────────────────────────────────────────────────────
HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.sampled_from([0, -1, 1, 10**15, 2**62, -(10**15)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "",
            "f8",
            "q4",
            "aten.frobnicate.default",
            "Teleport",
            "inf",
            "nan",
            "../../etc/passwd",
            "s0*s1",
            "__import__('os')",
            "x" * 300,
        ]
    ),
    st.text(max_size=12),
    st.lists(st.integers(min_value=-3, max_value=10**6), max_size=4),
    st.dictionaries(st.sampled_from(["ref", "int", "float", "list", "sym", "lit", "dtype"]), st.integers(), max_size=2),
)


def paths(doc, prefix=()):
    """Every path into a JSON document (dict keys and list indices)."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, prefix + (i,))


def mutate(doc, data):
    """Apply 1–3 mutations: replace a value, drop a key or item, duplicate an item, or swap types."""
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        all_paths = [p for p in paths(doc) if p]
        if not all_paths:
            break
        path = data.draw(st.sampled_from(all_paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        action = data.draw(st.sampled_from(["replace", "drop", "duplicate", "wrap"]))
        if action == "replace":
            parent[key] = data.draw(HOSTILE)
        elif action == "drop":
            del parent[key]
        elif action == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        else:
            parent[key] = [parent[key]]
    return doc


def timed(fn, file=None, doc=None):
    """Run one case: only a one-line RlxError may escape, within the time limit. With
    RLX_FUZZ_SAVE=1 a crashing document is written to the corpus before the test fails."""
    t0 = time.perf_counter()
    try:
        fn()
    except RlxError as e:
        assert str(e) and "\n" not in str(e), f"error message must be one line: {e!r}"
    except BaseException as e:
        if os.environ.get("RLX_FUZZ_SAVE") and doc is not None:
            # One file per distinct crash site; hypothesis shrinks towards the smallest case,
            # which overwrites the earlier ones.
            tb = e.__traceback__
            while tb.tb_next:
                tb = tb.tb_next
            site = f"{Path(tb.tb_frame.f_code.co_filename).stem}-{tb.tb_lineno}-{type(e).__name__}"
            (CORPUS / f"{file.split('.')[0]}-{site}.json").write_text(json.dumps({"file": file, "doc": doc}))
        raise
    elapsed = time.perf_counter() - t0
    assert elapsed < TIME_LIMIT_S, f"took {elapsed:.1f}s"


def load_and_run_torch_ir(doc, weights):
    ir = torch_ir.parse(doc)
    program = build_program(ir)
    model = Model(program, bind_weights(program, weights, "weights"))
    inputs = [
        np.zeros(tuple(d if isinstance(d, int) else 2 for d in v.shape), to_numpy(v.dtype)) for v in program.inputs
    ]
    model.run_flat(model.bind(tuple(inputs), {}))


# ── properties ───────────────────────────────────────────────────────────────
@FUZZ
@given(data=st.data())
def test_torch_ir_mutations(valid, data):
    doc = json.loads((valid / "torch-ir.json").read_text())
    weights, _ = rlx.formats.safetensors_io.read(valid / "weights.safetensors")
    mutated = mutate(doc, data)
    timed(lambda: load_and_run_torch_ir(mutated, weights), "torch-ir.json", mutated)


def write_bundle_variant(valid, tmp, name, text):
    b = tmp / "b"
    if b.exists():
        shutil.rmtree(b)
    shutil.copytree(valid / "bundle", b)
    (b / name).write_text(text)
    return b


def run_bundle(b):
    model = rlx.load(b)
    inputs = [np.zeros(tuple(d if isinstance(d, int) else 2 for d in v.shape), to_numpy(v.dtype)) for v in model.inputs]
    model(*inputs)


@pytest.mark.parametrize("name", ["program.json", "meta.json"])
@FUZZ
@given(data=st.data())
def test_bundle_json_mutations(valid, tmp_path, name, data):
    doc = mutate(json.loads((valid / "bundle" / name).read_text()), data)
    b = write_bundle_variant(valid, tmp_path, name, json.dumps(doc))
    timed(lambda: run_bundle(b), name, doc)


def safetensors_parts(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


@FUZZ
@given(data=st.data())
def test_safetensors_header_mutations(valid, tmp_path, data):
    header, payload = safetensors_parts(valid / "bundle" / "weights.safetensors")
    head = json.dumps(mutate(header, data)).encode()
    b = tmp_path / "b"
    if b.exists():
        shutil.rmtree(b)
    shutil.copytree(valid / "bundle", b)
    (b / "weights.safetensors").unlink()
    (b / "weights.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + payload)
    timed(lambda: run_bundle(b))


@FUZZ
@given(cut=st.integers(min_value=0, max_value=4000), noise=st.binary(max_size=64))
def test_truncated_and_noisy_files(valid, tmp_path, cut, noise):
    for name in ("program.json", "meta.json", "weights.safetensors"):
        raw = (valid / "bundle" / name).read_bytes()
        b = tmp_path / "b"
        if b.exists():
            shutil.rmtree(b)
        shutil.copytree(valid / "bundle", b)
        (b / name).unlink()
        (b / name).write_bytes(raw[: min(cut, len(raw))] + noise)
        timed(lambda b=b: run_bundle(b))


# ── regression corpus ────────────────────────────────────────────────────────
CASES = sorted(CORPUS.glob("*.json"))


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_corpus(valid, tmp_path, case):
    """Each corpus file: {"file": which file it replaces, "doc": its JSON}."""
    entry = json.loads(case.read_text())
    if entry["file"] == "torch-ir.json":
        weights, _ = rlx.formats.safetensors_io.read(valid / "weights.safetensors")
        timed(lambda: load_and_run_torch_ir(entry["doc"], weights))
    else:
        b = write_bundle_variant(valid, tmp_path, entry["file"], json.dumps(entry["doc"]))
        timed(lambda: run_bundle(b))
