# spec: {"op": "ensure_elements", "scope": "", "target": "B", "values": [3]}
# status: changed
A = B = [1, 2]
# output
A = B = [1, 2, 3]
