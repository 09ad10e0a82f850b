# spec: {"op": "ensure_base", "scope": "build", "value": "Mixin"}
# status: anchor_missing
def build():
    return 1
