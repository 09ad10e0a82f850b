# spec: {"op": "ensure_elements", "scope": "", "target": "SEEN", "values": ["a"]}
# status: changed
SEEN = set()
# output
SEEN = {"a"}
