# spec: {"op": "ensure_import", "code": "from .interfaces import SupportsEagle3"}
# status: changed
import torch

from .interfaces import SupportsLoRA, SupportsPP

x = 1
# output
import torch

from .interfaces import SupportsLoRA, SupportsPP, SupportsEagle3

x = 1
