# spec: {"op": "ensure_import", "code": "from .interfaces import SupportsEagle3, SupportsMRoPE as MRoPE"}
# status: changed
from .interfaces import (
    SupportsLoRA,
    SupportsPP,
)
# output
from .interfaces import (
    SupportsLoRA,
    SupportsPP,
    SupportsEagle3,
    SupportsMRoPE as MRoPE,
)
