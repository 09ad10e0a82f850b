# spec: {"op": "remove_elements", "containing": ["a"], "values": ["b"]}
# status: unchanged
X = f(["a", "c"])
