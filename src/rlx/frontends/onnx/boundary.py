"""Where the ONNX front-end calls other libraries on a user's file: the onnx package, onnxruntime,
and the file system for external data. Whatever they raise comes back as one ``RlxError`` line
naming the model and what is wrong.

External data is read by rlx itself, never by ``onnx.load_external_data_for_model`` or
``numpy_helper.to_array`` (which resolve a location against the process's working directory for a
``ModelProto`` and follow symlinks): a location must be relative, stay inside the model's directory
once every symlink is resolved (``os.path.realpath`` of both), name a regular file, and its
``offset``/``length`` must lie inside that file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlx.errors import LoweringError, SchemaError, UnsupportedOpError, UsageError, WeightsError

MAX_DETAIL = 200  # characters of a library's own message kept in ours


def one_line(text: object, limit: int = MAX_DETAIL) -> str:
    """A library's message as one short line (onnxruntime and the onnx checker write several)."""
    flat = re.sub(r"\s+", " ", str(text)).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@contextmanager
def naming(where: str) -> Iterator[None]:
    """Every error about the model raised inside names it (``where``) first, so a message from
    deep in lowering (``node conv (Conv): …``) still says which file it is about (errors about the
    output directory or the arguments already name what they are about)."""
    try:
        yield
    except (SchemaError, LoweringError, UnsupportedOpError, WeightsError) as e:
        msg = str(e)
        if where and not msg.startswith(where):
            e.args = (f"{where}: {msg}", *e.args[1:])
        raise


def invalid_text(message: Any, path: str = "") -> str | None:
    """The first string field of a protobuf message that is not valid UTF-8 (protobuf hands such a
    field back as ``bytes``, which every name-handling step would trip over), as a dotted path."""
    for fd, value in message.ListFields():
        if fd.type not in (fd.TYPE_MESSAGE, fd.TYPE_STRING):
            continue  # numbers and bytes (raw_data, float_data …): nothing to check, maybe large
        repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED
        items = list(value) if repeated else [value]
        if fd.type == fd.TYPE_MESSAGE:
            for k, item in enumerate(items):
                found = invalid_text(item, f"{path}{fd.name}{f'[{k}]' if repeated else ''}.")
                if found:
                    return found
        elif fd.type == fd.TYPE_STRING and any(isinstance(v, bytes) for v in items):
            return f"{path}{fd.name}"
    return None


def check_text(proto: Any, where: str) -> None:
    bad = invalid_text(proto)
    if bad:
        raise SchemaError(f"{where}: field {bad} is not valid UTF-8 text; the file is damaged")


# ── external data ────────────────────────────────────────────────────────────
EXTERNAL = 1  # TensorProto.EXTERNAL


def uses_external_data(proto: Any) -> bool:
    return any(t.data_location == EXTERNAL for t, _ in all_tensors(proto))


def all_tensors(proto: Any) -> Iterator[tuple[Any, str]]:
    """Every TensorProto of a model with a description of where it is: initializers and node
    attributes (``Constant``'s value …) of the graph, of every subgraph, and of local functions."""
    yield from _graph_tensors(proto.graph, "")
    for f in proto.functions:
        for node in f.node:
            yield from _node_tensors(node, f"function {f.name}: ")


def _graph_tensors(g: Any, prefix: str) -> Iterator[tuple[Any, str]]:
    for t in g.initializer:
        yield t, f"{prefix}initializer {t.name!r}"
    for s in g.sparse_initializer:
        yield s.values, f"{prefix}sparse initializer {s.values.name!r}"
        yield s.indices, f"{prefix}sparse initializer {s.values.name!r} (indices)"
    for node in g.node:
        yield from _node_tensors(node, prefix)


def _node_tensors(node: Any, prefix: str) -> Iterator[tuple[Any, str]]:
    name = one_line(node.name or node.op_type, 120)
    for a in node.attribute:
        where = f"{prefix}node {name} attribute {one_line(a.name, 80)}"
        if a.HasField("t"):
            yield a.t, where
        for t in a.tensors:
            yield t, where
        if a.HasField("g"):
            yield from _graph_tensors(a.g, f"{where}: ")
        for sub in a.graphs:
            yield from _graph_tensors(sub, f"{where}: ")


def load_external_data(proto: Any, base_dir: str | Path | None, where: str) -> Any:
    """A copy of ``proto`` with every external tensor's bytes read into it from inside ``base_dir``
    (``proto`` itself is left as it is); ``proto`` when nothing is external."""
    if not uses_external_data(proto):
        return proto
    if base_dir is None:
        first = next(w for t, w in all_tensors(proto) if t.data_location == EXTERNAL)
        raise UsageError(
            f"{where}: {first} keeps its data in an external file; external data needs the model's directory "
            "(pass base_dir=)"
        )
    root = os.path.realpath(base_dir)
    if not os.path.isdir(root):
        raise UsageError(f"{where}: base_dir {str(base_dir)!r} is not a directory")
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for t, what in all_tensors(copy):
        if t.data_location == EXTERNAL:
            t.raw_data = _read_external(t, root, f"{where}: {what}")
            del t.external_data[:]
            t.data_location = 0  # DEFAULT: the bytes are in raw_data now
    return copy


def _read_external(t: Any, root: str, where: str) -> bytes:
    entries: dict[str, str] = {}
    for e in t.external_data:
        if e.key in entries:
            raise SchemaError(f"{where}: external data key {e.key!r} is given twice")
        entries[e.key] = e.value
    location = entries.get("location", "")
    real = _external_file(location, root, where)
    offset = _int_entry(entries, "offset", 0, where)
    size = os.path.getsize(real)
    length = _int_entry(entries, "length", size - offset if offset <= size else 0, where)
    if offset > size or offset + length > size:
        raise SchemaError(
            f"{where}: external data range offset {offset} length {length} lies outside {location!r} "
            f"({size} bytes); the file is short or the entry is wrong"
        )
    try:
        with open(real, "rb") as f:
            f.seek(offset)
            data = f.read(length)
    except OSError as e:
        raise SchemaError(f"{where}: cannot read external data file {location!r}: {one_line(e)}") from None
    if len(data) != length:
        raise SchemaError(f"{where}: external data file {location!r} is short: {len(data)} of {length} bytes")
    return data


def _external_file(location: str, root: str, where: str) -> str:
    """The real path of an external data file, refused unless it is a regular file inside ``root``."""
    if not location:
        raise SchemaError(f"{where}: external data has no location")
    if "\x00" in location:
        raise SchemaError(f"{where}: external data location {location!r} contains a NUL character")
    if os.path.isabs(location) or Path(location).drive or location.startswith(("/", "\\")):
        raise SchemaError(f"{where}: external data location {location!r} is an absolute path; it must be relative")
    joined = os.path.join(root, location)
    if not _contains(root, os.path.normpath(joined)):
        raise SchemaError(f"{where}: external data location {location!r} escapes the model's directory {root}")
    real = os.path.realpath(joined)
    if not _contains(root, real):
        raise SchemaError(
            f"{where}: external data location {location!r} follows a symlink out of the model's directory "
            f"(to {real}); refusing to read it"
        )
    if not os.path.exists(real):
        raise SchemaError(f"{where}: external data file {location!r} is missing from {root}")
    if not os.path.isfile(real):
        raise SchemaError(f"{where}: external data location {location!r} is not a regular file")
    return real


def _int_entry(entries: dict[str, str], key: str, default: int, where: str) -> int:
    raw = entries.get(key)
    if raw is None or raw == "":
        return default
    if not re.fullmatch(r"[0-9]{1,19}", raw.strip()):  # ASCII digits only, below 2**63
        raise SchemaError(f"{where}: external data {key} {raw[:40]!r} is not a non-negative integer")
    return int(raw)


def _contains(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
