# spec: {"op": "ensure_import", "code": "from .interfaces import SupportsEagle3"}
# status: changed
"""Llama model."""

from __future__ import annotations

import torch
from torch import nn

from .interfaces import SupportsLoRA, SupportsPP
from .utils import maybe_prefix

logger = init_logger(__name__)
# output
"""Llama model."""

from __future__ import annotations

import torch
from torch import nn

from .interfaces import SupportsLoRA, SupportsPP, SupportsEagle3
from .utils import maybe_prefix

logger = init_logger(__name__)
