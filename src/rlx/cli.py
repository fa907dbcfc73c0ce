"""The ``rlx`` command: import, run, inspect, verify.

Exit codes: 0 success, 1 parity failure, 2 bad input or usage. Errors are one line on stderr
(``--debug`` prints the traceback too).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from rlx.errors import InputError, RlxError, UsageError
from rlx.formats.layout import PROGRAM_FILE, TORCH_IR_FILE, WEIGHTS_FILE, bundle_root
from rlx.ir.symbolic import Dim, Symbol, format_shape, format_symbol, static_shape
from rlx.runtime.engines import ENGINES, PRECISIONS, numpy_pass_names
from rlx.version import __version__

if TYPE_CHECKING:  # the app layer is imported by the commands that use it, to keep `rlx --help` fast
    from rlx.app.pipeline import ConvertReport

EXIT_OK, EXIT_PARITY, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse exits 2 as well; keep our one-line format
        raise UsageError(f"{self.prog}: {message} (see --help)")


def _add_renamed(parser: argparse.ArgumentParser, flag: str, old: str, **kwargs: Any) -> None:
    """``flag`` and its deprecated spelling ``old`` (hidden from --help); both default to None, so
    ``_renamed_flag`` can tell which was given."""
    parser.add_argument(flag, default=None, **kwargs)
    parser.add_argument(old, default=None, **{**kwargs, "help": argparse.SUPPRESS})


def _repeatable(parser: argparse.ArgumentParser, *flags: str, metavar: str, help: str) -> None:
    """An option given once per value (``--flag a --flag b``), collected into a list (empty by default)."""
    parser.add_argument(*flags, action="append", default=[], metavar=metavar, help=help)


def _renamed_flag(args: argparse.Namespace, flag: str, old: str, default: Any) -> Any:
    """The value of ``flag``, taking its deprecated spelling ``old`` too (one note on stderr)."""
    value, old_value = getattr(args, flag[2:].replace("-", "_")), getattr(args, old[2:].replace("-", "_"))
    if old_value is None:
        return default if value is None else value
    if value is not None:
        raise UsageError(f"rlx {args.command}: pass {flag} only ({old} is its deprecated spelling)")
    print(f"rlx: {old} is deprecated; use {flag}", file=sys.stderr)
    return old_value


def _artifacts(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(e.strip() for e in _renamed_flag(args, "--write", "--emit", "bundle").split(",") if e.strip())


MAX_COUNT = 2**31 - 1  # beyond this a count is a typo, and numpy/pyarrow/onnxruntime sizes overflow
MAX_THREADS = 4096


def count(minimum: int = 1, maximum: int = MAX_COUNT) -> Callable[[str], int]:
    """An argparse ``type=``: a whole number in ``minimum … maximum``, else one line (exit 2) naming the argument."""

    def parse(text: str) -> int:
        value: int | None
        try:
            value = int(text.strip(), 10)
        except ValueError:
            value = None
        if value is None or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be a whole number from {minimum} to {maximum:,}, not {text!r}")
        return value

    parse.__name__ = "count"  # argparse names the type in some messages
    return parse


def _add_artifact_options(p: argparse.ArgumentParser) -> None:
    """What a conversion writes: the options `rlx import` and `rlx build` share (each with its
    deprecated spelling, hidden from --help)."""
    _add_renamed(
        p,
        "--write",
        "--emit",
        metavar="ARTIFACTS",
        help="comma-separated artifacts to write: bundle (default), package, onnx",
    )
    _add_renamed(p, "--package-style", "--emit-style", choices=("numpy", "jax"),
                 help="array library of the generated package (default numpy; jax needs rlx[jax])")  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rlx", description="Convert PyTorch models to portable numpy bundles and prove them right.")
    p.add_argument("--version", action="version", version=f"rlx {__version__}")
    p.add_argument("--debug", action="store_true", help="print tracebacks on errors")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    imp = sub.add_parser("import", help="export a model file, lower it, write a bundle and check parity")
    imp.add_argument(
        "model_file", help="a .py file exposing `model` and `example_inputs` (or `get_model()`), or an .onnx model"
    )
    imp.add_argument("-o", "--out", required=True, help="output directory")
    _add_artifact_options(imp)
    imp.add_argument(
        "--verify",
        nargs="?",
        const="auto",
        default="auto",
        choices=("auto", "onnxruntime", "none"),
        help="check parity (default on): against PyTorch, or for .onnx against onnxruntime when installed",
    )
    imp.add_argument("--no-verify", dest="verify", action="store_const", const="none", help="skip the parity check")
    imp.add_argument("--decomposition", choices=("aten", "high", "core"), default="high")
    imp.add_argument("--force", action="store_true", help="overwrite an existing output directory")
    imp.add_argument(
        "--auto-decompose",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="decompose ops rlx lacks with torch's decompositions (default on)",
    )
    imp.add_argument(
        "--strict",
        action="store_true",
        help="export with TorchDynamo (torch.export strict mode), e.g. for transformers' static-cache wrappers",
    )
    _repeatable(imp, "--dynamic", metavar="NAME:AXIS[=SYMBOL[:MIN:MAX]]",
                help="make an input axis dynamic (repeatable; the same SYMBOL ties axes together)")  # fmt: skip
    _repeatable(imp, "--input-shape", metavar="NAME=D0,D1,...",
                help="ONNX: fix an input's dimensions while converting, ? keeps one dynamic (repeatable), e.g. x=1,3,?,?")  # fmt: skip
    imp.add_argument(
        "--keep-exported",
        action="store_true",
        help="also save exported.pt2 (a second copy of the weights) and compare every node for `rlx debug` "
        "(done anyway when parity fails)",
    )
    imp.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    bld = sub.add_parser("build", help="lower an exported directory (torch-ir.json + weights) without torch")
    bld.add_argument("dir", help="directory holding torch-ir.json and weights.safetensors")
    bld.add_argument("-o", "--out", help="output directory (default: DIR itself)")
    _add_artifact_options(bld)
    bld.add_argument("--verify", action="store_true", help="check parity against DIR/reference.safetensors")
    _repeatable(bld, "--input-shape", metavar="NAME=D0,D1,...",
                help="fix a dynamic input's dimensions while building, ? keeps one dynamic (repeatable), e.g. x=1,?")  # fmt: skip
    bld.add_argument("--force", action="store_true", help="overwrite an existing bundle / output directory")
    bld.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    run = sub.add_parser("run", help="run a bundle on .npy inputs (numpy, or JAX with --engine jax)")
    run.add_argument("bundle", help="bundle directory (or an OUT directory from `rlx import`)")
    _repeatable(run, "--input", "-i", metavar="NAME=FILE.npy", help="an input array")
    run.add_argument("-o", "--out", help="directory to write outputs as out<k>.npy")
    run.add_argument("--no-opt", action="store_true", help="run the program as written (no optimisation passes)")
    _repeatable(run, "--disable-pass", metavar="NAME",
                help="switch one numpy optimisation pass off (repeatable): " + ", ".join(numpy_pass_names()))  # fmt: skip
    _add_renamed(
        run,
        "--engine",
        "--backend",
        choices=ENGINES,
        help="numpy, jax (one XLA computation, needs rlx[jax]), onnxruntime (needs rlx[onnxruntime]) or openvino "
        "(needs rlx[openvino]); default: the bundle's tuning.json (`rlx tune`) where it matches this machine, else numpy",
    )
    run.add_argument("--precision", choices=PRECISIONS,
                     help="f32 (default), bf16/f16 (openvino), int8 (onnxruntime), int8-static (both)")  # fmt: skip
    run.add_argument(
        "--threads",
        type=count(maximum=MAX_THREADS),
        help="onnxruntime's intra-op threads (default: one per core); numpy: threads for large steps (default 1)",
    )
    run.add_argument("--seed", type=int, default=0, help="where a model with random ops starts drawing (default 0)")
    run.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    ins = sub.add_parser("inspect", help="show inputs, outputs, parameters and ops of a bundle or torch-ir.json")
    ins.add_argument("path")
    ins.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    dbg = sub.add_parser("debug", help="find the first aten node whose result diverges from PyTorch (needs torch)")
    dbg.add_argument("out", help="an output directory of `rlx import`")
    dbg.add_argument("--top", type=count(), default=15, help="rows in the table (worst first)")
    dbg.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    rep = sub.add_parser("report", help="rebuild OUT/report.html")
    rep.add_argument("out", help="an output directory of `rlx import` or `rlx build`")
    rep.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    ops = sub.add_parser("ops", help="list the aten ops the registry lowers (markdown table)")
    ops.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    bat = sub.add_parser("batch", help="run a bundle over a dataset (Parquet, .npy/.npz) into Parquet shards")
    bat.add_argument("bundle", help="bundle directory (or an OUT directory from `rlx import`)")
    bat.add_argument("--input", "-i", required=True, nargs="+", action="extend", metavar="DATA",
                     help="Parquet files or directories, or one .npy/.npz file")  # fmt: skip
    bat.add_argument("--output", "-o", required=True, help="output directory (a rerun resumes it)")
    bat.add_argument("--batch-size", type=count(), default=256, help="rows per model call (default 256)")
    _repeatable(bat, "--column", metavar="INPUT=COLUMN",
                help="read model input INPUT from data column COLUMN (repeatable; default: same name)")  # fmt: skip
    bat.add_argument("--keep", action="append", metavar="COLUMN",
                     help="input column to carry into the output (repeatable; default: every non-input column)")  # fmt: skip
    bat.add_argument("--engine", choices=ENGINES, default=None,
                     help="runtime engine (default: the bundle's tuning.json (`rlx tune`) where it matches this "
                     "machine, else numpy)")  # fmt: skip
    bat.add_argument("--precision", choices=PRECISIONS, help="with --engine: f32 (default), bf16/f16, int8/int8-static")
    bat.add_argument("--on-error", choices=("stop", "skip"), default="stop",
                     help="stop at the first bad row (default), or skip bad rows into OUT/_skipped.jsonl")  # fmt: skip
    bat.add_argument("--shard-rows", type=count(), default=65_536, help="input rows per output shard (default 65536)")
    bat.add_argument("--ray", action="store_true", help="run shards on Ray workers (needs rlx[ray])")
    bat.add_argument("--address", help="Ray cluster address (default: start a local one)")
    bat.add_argument("--workers", type=count(maximum=MAX_THREADS), default=2, help="Ray workers (default 2)")
    bat.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    ver = sub.add_parser("verify", help="re-run parity of an OUT directory or bundle against its reference")
    ver.add_argument("path")
    ver.add_argument("--reference", help="reference.safetensors (default: next to the bundle)")
    ver.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    ben = sub.add_parser("bench", help="time every installed engine on a bundle, check parity, name the fastest")
    ben.add_argument("bundle", help="bundle directory (or an OUT directory from `rlx import`)")
    ben.add_argument(
        "--engines", help="comma-separated engines (default: every installed one of numpy, jax, onnxruntime)"
    )
    ben.add_argument("--batch", type=count(), help="resize the dynamic batch axis (axis 0) of the inputs to N")
    ben.add_argument(
        "--threads",
        type=count(maximum=MAX_THREADS),
        help="threads per engine (onnxruntime intra-op; BLAS and large steps for numpy)",
    )
    ben.add_argument("--runs", type=count(), default=30, help="timed runs per engine (default 30)")
    ben.add_argument("--warmup", type=count(minimum=0), default=3, help="untimed runs first (default 3)")
    ben.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    tun = sub.add_parser(
        "tune", help="find the fastest engine and precision within a parity tolerance; write BUNDLE/tuning.json"
    )
    tun.add_argument("bundle", help="bundle directory (or an OUT directory from `rlx import`)")
    tun.add_argument("--tolerance", type=float, default=0.999, help="minimum cosine per output (default 0.999)")
    tun.add_argument(
        "--max-error", type=float, default=1e-2,
        help="maximum |error| per output, relative to the output's scale where that exceeds 1 (default 1e-2)",
    )  # fmt: skip
    tun.add_argument(
        "--engines", help=f"comma-separated engines (default: every installed one of {', '.join(ENGINES)})"
    )
    tun.add_argument("--precisions", help=f"comma-separated precisions (default: all of {', '.join(PRECISIONS)} "
                     "that an engine runs on this CPU)")  # fmt: skip
    tun.add_argument("--inputs", help="more inputs to check, which also calibrate int8-static: .npz (arrays by "
                     "input name), .safetensors (in::NAME) or .parquet (a column per input, a row per set)")  # fmt: skip
    tun.add_argument("--threads", type=int, help="threads per engine at most (the fastest candidates are also "
                     "timed at halvings of it; the choice's count goes to tuning.json; default: each engine's)")  # fmt: skip
    tun.add_argument("--no-write", action="store_true", help="report only; leave tuning.json as it is")
    tun.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = _parser().parse_args(argv)
        return {
            "import": cmd_import,
            "run": cmd_run,
            "inspect": cmd_inspect,
            "verify": cmd_verify,
            "build": cmd_build,
            "debug": cmd_debug,
            "report": cmd_report,
            "ops": cmd_ops,
            "batch": cmd_batch,
            "bench": cmd_bench,
            "tune": cmd_tune,
        }[args.command](args)
    except RlxError as e:
        if debug:
            traceback.print_exc()
        print(f"rlx: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("rlx: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        sys.stderr.close()
        return EXIT_OK
    except Exception as e:  # a bug in rlx: still one line, with the way to get details
        if debug:
            traceback.print_exc()
        print(f"rlx: internal error: {type(e).__name__}: {e} (rerun with --debug and report it)", file=sys.stderr)
        return EXIT_USAGE


def _say(msg: str) -> None:
    print(msg, flush=True)


# ── import ───────────────────────────────────────────────────────────────────
DynamicAxis = tuple[str, int, str, int | None, int | None]


def parse_dynamic(text: str) -> DynamicAxis:
    """``NAME:AXIS[=SYMBOL[:MIN:MAX]]`` → (input name, axis, symbol, min, max)."""
    head, eq, sym_part = text.partition("=")
    name, sep, axis = head.partition(":")
    bad = UsageError(f"--dynamic {text!r}: expected NAME:AXIS[=SYMBOL[:MIN:MAX]], e.g. input_ids:1=seq:2:512")
    if not sep or not name or not axis.lstrip("-").isdigit() or (eq and not sym_part):
        raise bad
    symbol, lo, hi = f"{name}_{axis.lstrip('-')}", None, None
    if sym_part:
        parts = sym_part.split(":")
        if len(parts) not in (1, 3) or not parts[0].isidentifier():
            raise bad
        symbol = parts[0]
        if len(parts) == 3:
            if not all(p.isdigit() for p in parts[1:]) or int(parts[1]) > int(parts[2]):
                raise bad
            lo, hi = int(parts[1]), int(parts[2])
    return name, int(axis), symbol, lo, hi


def load_model_file(path: str) -> tuple[Any, tuple[Any, ...], dict[str, Any], Any]:
    """Import MODEL.py and return (model, example_inputs, example_kwargs, dynamic_shapes)."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{path}: no such file; pass a Python file that defines `model` and `example_inputs`")
    spec = importlib.util.spec_from_file_location(f"rlx_user_model_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise UsageError(f"{path}: importing it failed: {type(e).__name__}: {e}") from e
    finally:
        sys.path.pop(0)
    if hasattr(module, "get_model"):
        got = module.get_model()
        if not isinstance(got, tuple) or len(got) not in (2, 3):
            raise UsageError(f"{path}: get_model() must return (model, example_inputs[, example_kwargs])")
        model, inputs = got[0], got[1]
        kwargs = got[2] if len(got) == 3 else getattr(module, "example_kwargs", {})
    elif hasattr(module, "model") and hasattr(module, "example_inputs"):
        model, inputs, kwargs = module.model, module.example_inputs, getattr(module, "example_kwargs", {})
    else:
        raise UsageError(f"{path}: defines neither `model` + `example_inputs` nor `get_model()`")
    if not isinstance(inputs, tuple):
        inputs = tuple(inputs) if isinstance(inputs, list) else (inputs,)
    return model, inputs, dict(kwargs or {}), getattr(module, "dynamic_shapes", None)


def cmd_import(args: argparse.Namespace) -> int:
    from rlx.formats.atomic import check_writable_target

    check_writable_target(args.out, args.force)
    if Path(args.model_file).suffix.lower() == ".onnx":  # the front-end is chosen by the file suffix
        return _import_onnx(args)
    from rlx.app.convert import from_torch

    if args.verify == "onnxruntime":
        raise UsageError("--verify onnxruntime applies to .onnx models; a PyTorch model is checked against PyTorch")
    if args.input_shape:
        raise UsageError("--input-shape applies to .onnx models; a PyTorch model's shapes are its example inputs'")
    _say(f"rlx {__version__}: importing {args.model_file} (decomposition {args.decomposition})")
    dynamic = [parse_dynamic(d) for d in args.dynamic]
    model, inputs, kwargs, dynamic_shapes = load_model_file(args.model_file)
    if dynamic:
        from rlx.frontends.torch import dynamic_shapes_from_cli

        dynamic_shapes = dynamic_shapes_from_cli(dynamic)
    labels = {"export": "exported with torch.export", "lower": "lowered to the rlx program",
              "write": f"wrote {args.out}", "verify": "checked parity against PyTorch"}  # fmt: skip
    return _convert(
        from_torch,
        args,
        labels,
        model,
        inputs,
        args.out,
        example_kwargs=kwargs,
        verify=args.verify != "none",
        decomposition=args.decomposition,
        dynamic_shapes=dynamic_shapes,
        auto_decompose=args.auto_decompose,
        strict=args.strict,
        keep_exported=args.keep_exported,
    )


def _convert(
    convert: Callable[..., ConvertReport],
    args: argparse.Namespace,
    labels: dict[str, str],
    *sources: Any,
    **options: Any,
) -> int:
    """Run a conversion with the options `rlx import` and `rlx build` share (--write, --force,
    --package-style), one line per step as it finishes, then the report's summary."""
    report = convert(
        *sources,
        write=_artifacts(args),
        force=args.force,
        package_style=_renamed_flag(args, "--package-style", "--emit-style", "numpy"),
        on_step=lambda name, secs: _say(f"  {labels.get(name, name):<40} {secs:7.2f} s"),
        **options,
    )
    _say("")
    _say(report.summary())
    return EXIT_OK if report.passed else EXIT_PARITY


def _import_onnx(args: argparse.Namespace) -> int:
    from rlx.app.onnx_convert import from_onnx
    from rlx.frontends.onnx.input_shapes import parse_input_shape

    if args.dynamic:
        raise UsageError("--dynamic applies to PyTorch models; an ONNX model's dim_param axes are dynamic already")
    input_shapes = dict(parse_input_shape(t) for t in args.input_shape)
    _say(f"rlx {__version__}: importing {args.model_file} (ONNX)")
    labels = {"read": "read the ONNX model", "lower": "lowered to the rlx program", "write": f"wrote {args.out}",
              "onnxruntime": "ran onnxruntime for the reference", "verify": "checked parity against onnxruntime"}  # fmt: skip
    return _convert(from_onnx, args, labels, args.model_file, args.out, verify=args.verify, input_shapes=input_shapes)


def cmd_build(args: argparse.Namespace) -> int:
    from rlx.app.convert import build
    from rlx.frontends.onnx.input_shapes import parse_input_shape  # the same NAME=1,3,?,? syntax

    _say(f"rlx {__version__}: building {args.dir}")
    labels = {"read": "read torch-ir.json", "lower": "lowered to the rlx program", "write": "wrote the bundle",
              "verify": "checked parity against reference.safetensors"}  # fmt: skip
    return _convert(
        build,
        args,
        labels,
        args.dir,
        args.out,
        verify=args.verify,
        input_shapes=dict(parse_input_shape(t) for t in args.input_shape),
    )


# ── run ──────────────────────────────────────────────────────────────────────
def _read_npy(name: str, file: str) -> np.ndarray:
    from rlx.formats.npy_io import read_npy  # header checked before allocating; every failure one InputError line

    return read_npy(file, f"input {name!r}")


def cmd_run(args: argparse.Namespace) -> int:
    from rlx.runtime import load

    model = load(
        args.bundle,
        optimize=not args.no_opt,
        engine=_renamed_flag(args, "--engine", "--backend", None),
        disable_passes=args.disable_pass,
        threads=args.threads,
        seed=args.seed,
        precision=args.precision,
    )
    if model.tuning_fallback:
        print(f"rlx: {model.tuning_fallback}", file=sys.stderr)
    named = {}
    for item in args.input:
        name, sep, file = item.partition("=")
        if not sep or not name or not file:
            raise UsageError(f"--input {item!r}: expected NAME=FILE.npy")
        named[name] = _read_npy(name, file)
    flat = model.run_flat(model.bind((), named))
    out_dir = Path(args.out) if args.out else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    for k, arr in enumerate(flat):
        arr = np.asarray(arr)
        line = f"out{k}: shape {list(arr.shape)} dtype {arr.dtype}"
        if out_dir:
            np.save(out_dir / f"out{k}.npy", arr)
            line += f" -> {out_dir / f'out{k}.npy'}"
        _say(line)
    return EXIT_OK


# ── inspect ──────────────────────────────────────────────────────────────────
def cmd_inspect(args: argparse.Namespace) -> int:
    path = bundle_root(Path(args.path))
    if path.is_dir() and (path / PROGRAM_FILE).is_file():
        _inspect_bundle(path)
    elif path.is_file() and path.suffix == ".json" or (path / TORCH_IR_FILE).is_file():
        _inspect_torch_ir(path if path.is_file() else path / TORCH_IR_FILE)
    else:
        raise UsageError(f"{args.path}: not a bundle directory or a torch-ir.json file")
    return EXIT_OK


def _fmt_values(title: str, rows: Sequence[tuple[str, Sequence[Dim], str]]) -> list[str]:
    return [f"{title}:"] + [f"  {name:<24} {format_shape(shape):<20} {dtype}" for name, shape, dtype in rows]


def _weight_numel(name: str, shape: Sequence[Dim]) -> int:
    static = static_shape(shape)
    if static is None:  # weights are stored tensors: their shapes are static
        raise InputError(f"weight {name} has the symbolic shape {format_shape(shape)}")
    return math.prod(static)


def _fmt_hist(title: str, hist: dict[str, int]) -> list[str]:
    return [f"{title} ({sum(hist.values())}):"] + [f"  {n:>5}  {op}" for op, n in hist.items()]


def _fmt_symbols(symbols: Sequence[Symbol], data_symbols: Sequence[Symbol]) -> list[str]:
    lines = []
    for title, listed in (("symbols:", symbols), ("sizes set by the data:", data_symbols)):
        if listed:
            lines += [title] + [f"  {format_symbol(s)}" for s in listed]
    return lines


def _inspect_bundle(path: Path) -> None:
    from rlx.batch.spec import output_leaves
    from rlx.formats.bundle import read_program

    program, meta = read_program(path)  # both files checked, as loading them would
    n_params = sum(_weight_numel(w.name, w.shape) for w in program.weights)
    n_bytes = (path / WEIGHTS_FILE).stat().st_size if (path / WEIGHTS_FILE).exists() else 0
    source = meta.get("source", {}) if isinstance(meta, dict) else {}
    lines = [f"bundle {path}: model {program.name}"]
    if source.get("producer") or source.get("decomposition"):
        lines.append(f"source: {source.get('producer', '?')}, decomposition {source.get('decomposition', '?')}")
    lines += _fmt_values("inputs", [(v.name, v.shape, v.dtype) for v in program.user_inputs])
    lines += _fmt_symbols(program.symbols, program.data_symbols)
    if program.state:
        state = {v.name: v for v in program.inputs}
        lines += _fmt_values("state (updated by every call)", [(s.name, state[s.name].shape, state[s.name].dtype)
                                                                for s in program.state])  # fmt: skip
    values = program.values()
    paths = {index: path for _, path, index in output_leaves(program.output_tree)} if program.output_tree else {}
    outs = [
        (_output_label(k, paths.get(k)), values[o.name].shape, values[o.name].dtype)
        for k, o in enumerate(program.outputs[: program.n_user_outputs])
        if hasattr(o, "name")
    ]
    lines += _fmt_values("outputs", outs)
    lines.append(f"parameters: {n_params:,} in {len(program.weights)} tensors ({n_bytes / 1e6:.2f} MB on disk)")
    lines += _fmt_hist("source aten ops", program.source_histogram)
    lines += _fmt_hist("instructions", program.call_histogram())
    _say("\n".join(lines))


def _output_label(index: int, path: tuple[str | int, ...] | None) -> str:
    """Where output ``index`` sits in what the model returns (``logits``, ``cache[3]``), else ``out<index>``."""
    if not path:
        return f"out{index}"
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" if k else str(p) for k, p in enumerate(path))


def _inspect_torch_ir(path: Path) -> None:
    from rlx.formats import torch_ir

    ir = torch_ir.load(path)
    n_params = sum(_weight_numel(w.id, w.shape) for w in ir.weights)
    lines = [f"torch-ir {path}: model {ir.model_name}"]
    if ir.producer or ir.decomposition:
        lines.append(f"producer: {ir.producer or '?'}, decomposition {ir.decomposition or '?'}")
    lines += _fmt_values("inputs", [(i.id, i.shape, i.dtype) for i in ir.inputs])
    lines += _fmt_symbols(ir.symbols, ir.data_symbols)
    lines += _fmt_values("outputs", [(o.ref or "const", o.shape or (), o.dtype or "-") for o in ir.outputs])
    if ir.state_updates:
        lines.append("state updates: " + ", ".join(f"out{k} → {t}" for t, k in ir.state_updates.items()))
    lines.append(f"parameters: {n_params:,} in {len(ir.weights)} tensors")
    lines += _fmt_hist("aten ops", ir.op_histogram())
    _say("\n".join(lines))


def cmd_debug(args: argparse.Namespace) -> int:
    from rlx.app.debug import debug_dir
    from rlx.app.report import write_report

    report = debug_dir(args.out)
    write_report(args.out)
    _say(report.table(args.top))
    if report.first_divergent is not None and (Path(args.out) / "repro").is_dir():
        _say(f"reproducer: {Path(args.out) / 'repro'} (re-run: rlx build {Path(args.out) / 'repro'} --verify --force)")
    _say(f"wrote {Path(args.out) / 'debug.json'} and {Path(args.out) / 'report.html'}")
    return EXIT_OK if report.first_divergent is None else EXIT_PARITY


def cmd_report(args: argparse.Namespace) -> int:
    from rlx.app.report import write_report

    _say(f"wrote {write_report(args.out)}")
    return EXIT_OK


def cmd_ops(args: argparse.Namespace) -> int:
    from rlx.frontends.aten.registry import op_table_markdown

    _say(op_table_markdown())
    return EXIT_OK


# ── batch ──────────────────────────────────────────────────────────────────
def cmd_batch(args: argparse.Namespace) -> int:
    from rlx.batch.run import make_job

    columns = {}
    for item in args.column:
        name, sep, column = item.partition("=")
        if not sep or not name or not column:
            raise UsageError(f"--column {item!r}: expected INPUT=COLUMN")
        columns[name] = column
    job = make_job(
        args.bundle, args.input, args.output, batch_size=args.batch_size, columns=columns, keep=args.keep,
        engine=args.engine, precision=args.precision, on_error=args.on_error, shard_rows=args.shard_rows,
    )  # fmt: skip
    if args.ray:
        from rlx.batch.ray_run import run_job as run_on_ray

        summary = run_on_ray(job, address=args.address, workers=args.workers)
    else:
        from rlx.batch.run import run_job

        summary = run_job(job)
    _say(summary.line())
    return EXIT_OK


# ── verify ───────────────────────────────────────────────────────────────────
def cmd_verify(args: argparse.Namespace) -> int:
    from rlx.app.verify import verify_bundle

    report = verify_bundle(args.path, args.reference)
    _say(report.table())
    _say("parity: " + ("PASS" if report.passed else "FAIL"))
    return EXIT_OK if report.passed else EXIT_PARITY


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["json", "load_model_file", "main"]


# ── bench ────────────────────────────────────────────────────────────────────
def cmd_bench(args: argparse.Namespace) -> int:
    from rlx.app.bench import bench

    engines = [e.strip() for e in args.engines.split(",") if e.strip()] if args.engines else None
    report = bench(
        args.bundle, engines=engines, batch=args.batch, threads=args.threads, runs=args.runs, warmup=args.warmup
    )
    _say(f"{report.bundle}: inputs {report.inputs}")
    _say(report.table())
    return EXIT_OK if report.fastest is not None else EXIT_USAGE


# ── tune ─────────────────────────────────────────────────────────────────────
def cmd_tune(args: argparse.Namespace) -> int:
    from rlx.app.tune import tune

    def listed(text: str | None) -> list[str] | None:
        return [e.strip() for e in text.split(",") if e.strip()] if text else None

    report = tune(
        args.bundle,
        tolerance=args.tolerance,
        max_error=args.max_error,
        engines=listed(args.engines),
        precisions=listed(args.precisions),
        inputs=args.inputs,
        threads=args.threads,
        write=not args.no_write,
        progress=_say,
    )
    _say(f"{report.bundle}: checked on {', '.join(report.inputs)}; cosine >= {report.tolerance}, "
         f"max err <= {report.max_error} x scale")  # fmt: skip
    _say(report.table())
    if report.written:
        _say(f"wrote {report.written} ({report.seconds:.1f} s)")
    return EXIT_OK if report.choice is not None else EXIT_USAGE
