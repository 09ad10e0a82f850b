# spec: {"op": "add_file", "file": "servekit/marker.py", "text": "class Marker:\n    \"\"\"Set by vpatch.\"\"\"\n\n    ENABLED = True\n"}
# status: anchor_missing
class Marker:
    """Set by vpatch."""

    ENABLED = False
