# spec: {"op": "ensure_def", "scope": "build", "code": "def inner():\n    return 1\n"}
# status: anchor_missing
def build():
    return 1
