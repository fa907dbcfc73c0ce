"""Nothing lost, nothing read outside the bundle, robust inputs, many threads, long runs."""

from __future__ import annotations

import errno
import json
import os
import threading
import tracemalloc

import numpy as np
import pytest
import torch

import rlx
from rlx.errors import BundleError, InputError, OutputError, RlxError, SchemaError

from helpers import convert_example, load_example


@pytest.fixture(scope="module")
def mlp_out(tmp_path_factory):
    return convert_example(tmp_path_factory, "mlp")[0]


def snapshot(directory):
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "failure,expected",
    [
        (KeyboardInterrupt(), KeyboardInterrupt),
        (OSError(errno.ENOSPC, "No space left on device"), OutputError),
        (RuntimeError("boom"), RuntimeError),
    ],
    ids=["ctrl-c", "disk-full", "crash"],
)
def test_failed_import_leaves_existing_output_untouched(mlp_out, monkeypatch, failure, expected):
    before = snapshot(mlp_out)
    siblings = set(mlp_out.parent.iterdir())

    def fail(*args, **kwargs):
        raise failure

    monkeypatch.setattr("rlx.app.pipeline.write_bundle", fail)
    model, inputs = load_example("mlp").get_model()
    with pytest.raises(expected) as info:
        rlx.from_torch(model, inputs, mlp_out, force=True)
    if expected is OutputError:
        assert "No space left on device" in str(info.value) and "\n" not in str(info.value)
    assert snapshot(mlp_out) == before
    assert set(mlp_out.parent.iterdir()) == siblings, "a staging directory was left behind"


def copy_bundle(src, dst):
    dst.mkdir()
    for f in (src / "bundle").iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_symlink_out_of_the_bundle_is_refused(mlp_out, tmp_path):
    b = copy_bundle(mlp_out, tmp_path / "b")
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes((b / "weights.safetensors").read_bytes())
    (b / "weights.safetensors").unlink()
    os.symlink(outside, b / "weights.safetensors")
    with pytest.raises(BundleError, match="resolves outside the bundle directory"):
        rlx.load(b)


@pytest.mark.parametrize(
    "edit,error,message",
    [
        (lambda m, p: m["inputs"][0].update(shape=[4, 33]), BundleError, "do not match program.json"),
        (lambda m, p: m.update(format="something"), BundleError, "not an rlx bundle meta.json"),
        (lambda m, p: p["instrs"][0]["args"].update(x={"ref": "later"}), SchemaError, "before it is defined"),
        (
            lambda m, p: p["weights"][0].update(dtype="f16"),
            BundleError,
            "'fc1.weight' is f32[64, 32], the program declares f16",
        ),
        (lambda m, p: p["weights"][0].update(shape=[64, 31]), SchemaError, "permutation [1, 0] of [64, 31]"),
    ],
)
def test_mismatched_bundle_files(mlp_out, tmp_path, edit, error, message):
    b = copy_bundle(mlp_out, tmp_path / "b")
    meta, program = json.loads((b / "meta.json").read_text()), json.loads((b / "program.json").read_text())
    edit(meta, program)
    (b / "meta.json").write_text(json.dumps(meta))
    (b / "program.json").write_text(json.dumps(program))
    with pytest.raises(error) as info:
        rlx.load(b)
    assert message in str(info.value)


def test_extra_weight_in_the_bundle_is_refused(mlp_out, tmp_path):
    from rlx.formats import safetensors_io

    b = copy_bundle(mlp_out, tmp_path / "b")
    tensors, _ = safetensors_io.read(b / "weights.safetensors")
    tensors = {k: np.array(v) for k, v in tensors.items()}
    tensors["stowaway"] = np.zeros(3, np.float32)
    safetensors_io.write(b / "weights.safetensors", tensors)
    with pytest.raises(BundleError, match="'stowaway' are not used by the program"):
        rlx.load(b)


def test_deeply_nested_json_is_a_clean_error(mlp_out, tmp_path):
    b = copy_bundle(mlp_out, tmp_path / "b")
    (b / "program.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RlxError):
        rlx.load(b)


def test_inputs_torch_would_accept_are_converted(mlp_out):
    model = rlx.load(mlp_out)
    x = np.random.default_rng(0).standard_normal((32, 4)).astype(np.float32)
    want = model(np.ascontiguousarray(x.T))
    np.testing.assert_array_equal(model(x.T), want)  # non-contiguous view
    ro = np.ascontiguousarray(x.T)
    ro.setflags(write=False)
    np.testing.assert_array_equal(model(ro), want)  # read-only
    np.testing.assert_array_equal(model(np.ascontiguousarray(x.T).astype(">f4")), want)  # big-endian
    np.testing.assert_array_equal(model(x.T.tolist()), want)  # nested Python lists
    with pytest.raises(InputError, match="has shape \\[\\], expected \\[4, 32\\]"):
        model(3.0)
    with pytest.raises(InputError, match="dtype float64, expected float32"):
        model(x.T.astype(np.float64))


def assert_threads_match_serial(model, inputs, calls_per_thread):
    """One thread per input, each calling ``model`` repeatedly; every result must equal the serial one."""
    serial = [model(x) for x in inputs]
    mismatches = []

    def worker(k):
        for _ in range(calls_per_thread):
            if not np.array_equal(model(inputs[k]), serial[k]):
                mismatches.append(k)
                return

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not mismatches


def test_many_threads_give_serial_results(mlp_out):
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((4, 32)).astype(np.float32) for _ in range(8)]
    assert_threads_match_serial(rlx.load(mlp_out), inputs, 200)


def test_dynamic_model_threads_share_the_plan_cache():
    from helpers import convert

    model, example = load_example("decoder_lm").get_model()
    dim = torch.export.Dim
    runtime, _, _ = convert(model, example, dynamic_shapes={"input_ids": {0: dim("b", max=8), 1: dim("s", max=32)}})
    rng = np.random.default_rng(2)
    assert_threads_match_serial(runtime, [rng.integers(0, 100, (1 + k % 3, 2 + k)) for k in range(8)], 20)


def test_memory_does_not_grow_over_many_calls(mlp_out):
    model = rlx.load(mlp_out)
    x = np.ones((4, 32), np.float32)
    for _ in range(200):
        model(x)
    tracemalloc.start()
    for _ in range(1_000):
        model(x)
    base, _ = tracemalloc.get_traced_memory()
    for _ in range(10_000):
        model(x)
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert after - base < 256 * 1024, f"grew by {after - base} bytes over 10,000 calls"


@pytest.mark.parametrize(
    "error, line, summary",
    [
        (RuntimeError("Exception from src/core.cpp:12:\nCheck failed\n"), "Exception from src/core.cpp:12:",
         "RuntimeError: Exception from src/core.cpp:12:"),
        (ValueError("  \n"), "ValueError", "ValueError"),
        (MemoryError(), "MemoryError", "MemoryError"),
    ],
    ids=["many-lines", "blank", "no-message"],
)  # fmt: skip
def test_a_library_error_is_quoted_in_one_line(error, line, summary):
    """An engine library's exception, quoted inside rlx's own one-line messages: its first line (or
    its type where it says nothing), and with its type for the messages that name it."""
    from rlx.errors import first_line
    from rlx.errors import summary as summarize

    assert first_line(error) == line
    assert summarize(error) == summary
