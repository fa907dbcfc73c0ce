"""The ONNX front-end: an ONNX model → a Program on the same Call vocabulary as a torch model.

Needs the ``onnx`` package (``pip install 'rlx[onnx]'``), never torch. Lowerings are registered by
(domain, op_type) in ``registry.py``, one module per Call family (named in ``rlx.ir.calls.FAMILIES``:
``<family>.py`` or ``<family>_<topic>.py``), plus the ONNX-only op groups that have no Call family of
their own (``control``, ``quant``, ``text``). The conversion pipeline around it (bundle, parity
against onnxruntime, report) is ``rlx.app.onnx_convert`` (``rlx.from_onnx``). Importing the package
imports every family module, whose ``@onnx_op`` decorators fill the registry.
"""

# The family modules, then the ONNX-only op groups; importing each registers its handlers.
from rlx.frontends.onnx import elementwise, linalg, movement, nn, nn_recurrent, reduce  # noqa: F401, I001
from rlx.frontends.onnx import resample, selection, spectral  # noqa: F401
from rlx.frontends.onnx import control, quant, text  # noqa: F401
