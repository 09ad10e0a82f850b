# spec: {"op": "set_value", "scope": "make", "param": "name", "value": "worker"}
# status: changed
def make(kind, name):
    return kind, name
# output
def make(kind, name="worker"):
    return kind, name
