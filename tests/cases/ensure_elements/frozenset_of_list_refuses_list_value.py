# spec: {"op": "ensure_elements", "target": "S", "values": [[1, 2]]}
# status: invalid
S = frozenset([1, 2])
