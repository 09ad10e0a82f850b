# spec: {"op": "set_value", "scope": "make", "param": "name", "value": "worker"}
# status: unchanged
def make(kind, *, name='worker'):
    return kind, name
