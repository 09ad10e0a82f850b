# spec: {"op": "set_value", "scope": "make", "param": "kind", "value": "a"}
# status: invalid
def make(kind, name):
    return kind, name
