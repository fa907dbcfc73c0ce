"""Reading a user's ``.npy`` file: header checked before any allocation, every failure one line.

``numpy.load`` trusts the header: a damaged one raises whatever numpy's parser trips over
(``TokenError``, ``SyntaxError``, ``ValueError``) and a hostile shape asks for terabytes before
noticing the file is short. Here the header is read first, the data size it implies is compared
with the bytes the file has, and only then is the array read.
"""

from __future__ import annotations

import math
import os
import re
import tokenize
from pathlib import Path

import numpy as np

from rlx.errors import InputError

_HEADER_READERS = {(1, 0): "read_array_header_1_0", (2, 0): "read_array_header_2_0"}


def _one_line(e: BaseException) -> str:
    text = re.sub(r"\s+", " ", str(e)).strip()
    return f"{type(e).__name__}: {text[:150]}" if text else type(e).__name__


def read_npy(path: str | Path, what: str) -> np.ndarray:
    """The array in ``path``; ``what`` names it in messages (``input 'x'``). Raises ``InputError``."""
    path = Path(path)
    fmt = np.lib.format
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            version = fmt.read_magic(f)
            reader = _HEADER_READERS.get(version)
            if reader is None:
                raise InputError(f"{what}: {path}: .npy format version {version} is not supported (1.0 or 2.0)")
            try:
                shape, fortran_order, dtype = getattr(fmt, reader)(f)
            except MemoryError:  # Python's parser on a deeply nested header ('((((…'): nothing was allocated
                raise InputError(f"{what}: {path}: its header is nested too deeply to be a .npy header") from None
            if dtype.hasobject:
                raise InputError(f"{what}: {path}: holds Python objects ({dtype}); rlx reads numeric arrays only")
            need = math.prod(shape) * dtype.itemsize
            have = size - f.tell()
            if need != have:
                raise InputError(
                    f"{what}: {path}: its header declares {dtype}{list(shape)} ({need} bytes) but the file has "
                    f"{have} bytes of data; the file is damaged"
                )
            f.seek(0)
            return np.load(f, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"{what}: {path}: no such file") from None
    except InputError:
        raise
    except (
        ValueError,
        TypeError,
        SyntaxError,
        tokenize.TokenError,
        EOFError,
        OSError,
        OverflowError,
        MemoryError,
    ) as e:
        # numpy's header parser (a damaged header), its dtype parser, a short read
        raise InputError(f"{what}: {path} is not a readable .npy file ({_one_line(e)})") from None
