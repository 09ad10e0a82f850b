# spec: {"op": "set_value", "scope": "make", "param": "label", "value": "x"}
# status: anchor_missing
def make(kind, *args, name="worker", **kwargs):
    return kind, name
