# spec: {"op": "ensure_import", "code": "import orjson as json"}
# status: unchanged
try:
    import orjson as json
except ImportError:
    import json
