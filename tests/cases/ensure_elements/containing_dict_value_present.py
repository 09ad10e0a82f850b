# spec: {"op": "ensure_elements", "containing": ["a"], "values": ["b"]}
# status: unchanged
GROUPS = {"first": ["a", "b"], "second": ["c"]}
