# spec: {"op": "ensure_elements", "scope": "", "target": "PAIR", "values": ["c"]}
# status: changed
PAIR = "a", "b"
# output
PAIR = "a", "b", "c"
