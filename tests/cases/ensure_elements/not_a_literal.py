# spec: {"op": "ensure_elements", "scope": "", "target": "ALLOWED", "values": ["x"]}
# status: anchor_missing
ALLOWED = sorted({"b", "a"})
