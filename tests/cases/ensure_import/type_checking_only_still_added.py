# spec: {"op": "ensure_import", "code": "from .interfaces import SupportsEagle3"}
# status: changed
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .interfaces import SupportsEagle3


class Model(torch.nn.Module):
    pass
# output
from typing import TYPE_CHECKING

import torch
from .interfaces import SupportsEagle3

if TYPE_CHECKING:
    from .interfaces import SupportsEagle3


class Model(torch.nn.Module):
    pass
