# spec: {"op": "ensure_elements", "scope": "Loader.formats", "target": "supported", "values": ["gguf"]}
# status: ambiguous
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    class Loader:
        def formats(self):
            supported = ["safetensors"]
            return supported
else:
    class Loader:
        def formats(self):
            supported = ["safetensors", "bin"]
            return supported
