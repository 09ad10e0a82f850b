# spec: {"op": "add_file", "file": "servekit/marker.py", "text": "class Marker:\n    \"\"\"Set by vpatch.\"\"\"\n\n    ENABLED = True\n"}
# status: changed
# output
class Marker:
    """Set by vpatch."""

    ENABLED = True
