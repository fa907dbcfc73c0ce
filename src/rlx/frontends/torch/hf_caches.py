"""Let ``torch.export`` see through the KV-cache objects ``transformers`` models return.

A decoder built with its default config (``use_cache=True``) returns its keys and values in a
``transformers`` ``Cache`` object (``DynamicCache``, ``EncoderDecoderCache`` …), which ``torch.export``
refuses as an output unless the class is registered as a pytree node. ``transformers`` ships that
registration for its own exporter; rlx calls it, so such a model converts as it runs in eager: the
cache's tensors become outputs (a flat tuple under ``past_key_values``), in the order the cache holds
them. Nothing happens unless the user's process has already imported ``transformers``.
"""

from __future__ import annotations

import sys
from typing import Any

import torch


def register_transformers_caches(model: torch.nn.Module) -> None:
    """Register the ``transformers`` cache classes (and those of the model's own modeling files) as
    pytree nodes. Registering twice is harmless."""
    if "transformers" not in sys.modules:  # a model built without transformers returns no cache of it
        return
    try:
        from transformers.exporters import exporter_dynamo
    except ImportError:  # a transformers release without its exporter: export says what it cannot flatten
        return
    # (typed for a PreTrainedModel; it reads only the module's class and the file that defines it)
    register: Any = exporter_dynamo.register_cache_pytrees_for_model
    seen: set[str] = set()
    for module in model.modules():
        source = type(module).__module__
        if source.startswith("transformers.") and source not in seen:
            seen.add(source)
            register(module)
    if not seen:  # a wrapper of no transformers module may still build a cache: register the library's own
        register(model)
