# spec: {"op": "remove_elements", "containing": ["zzz"], "values": ["a"]}
# status: anchor_missing
X = ["a"]
