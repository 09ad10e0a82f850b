# spec: {"op": "ensure_elements", "target": "ORDER", "values": [3]}
# status: changed
ORDER = tuple([1, 2])
# output
ORDER = tuple([1, 2, 3])
