# spec: {"op": "remove_elements", "containing": ["a"], "values": ["b"]}
# status: ambiguous
X = ["a", "b"]
Y = {"k": ("a", "b")}
