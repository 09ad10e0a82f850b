# spec: {"op": "ensure_import", "code": "from .interfaces import SupportsPP"}
# status: invalid
from .legacy import SupportsPP
