"""The ONNX front-end: an ONNX model → a Program on the same Call vocabulary as a torch model.

Needs the ``onnx`` package (``pip install 'rlx[onnx]'``), never torch. Lowerings are registered by
(domain, op_type) in ``registry.py``, one module per op family. The conversion pipeline around it
(bundle, parity against onnxruntime, report) is ``rlx.app.onnx_convert`` (``rlx.from_onnx``).
Importing the package imports every family module, whose ``@onnx_op`` decorators fill the registry.
"""

from rlx.frontends.onnx import (  # noqa: E402, F401, I001
    control,
    elementwise,
    linalg,
    misc,
    nn,
    quant,
    recurrent,
    reduce,
    registry,  # noqa: F401  (first: each family registers into it)
    selection,
    shape,
    spectral,
    text,
)
