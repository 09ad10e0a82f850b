# spec: {"op": "ensure_import", "code": "from ..interfaces import SupportsEagle3"}
# status: changed
from .interfaces import SupportsPP

x = 1
# output
from .interfaces import SupportsPP
from ..interfaces import SupportsEagle3

x = 1
