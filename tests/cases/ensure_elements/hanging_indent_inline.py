# spec: {"op": "ensure_elements", "scope": "", "target": "NAMES", "values": ["delta"]}
# status: changed
NAMES = ["alpha", "beta",
         "gamma"]
# output
NAMES = ["alpha", "beta",
         "gamma", "delta"]
