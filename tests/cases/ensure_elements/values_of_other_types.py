# spec: {"op": "ensure_elements", "scope": "", "target": "MIXED", "values": [1, 2.5, true, ["x", 1], {"k": "v"}, 1.0]}
# status: changed
MIXED = [1, "one"]
# output
MIXED = [1, "one", 2.5, True, ["x", 1], {"k": "v"}, 1.0]
