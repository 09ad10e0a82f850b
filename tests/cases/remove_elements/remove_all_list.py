# spec: {"op": "remove_elements", "scope": "", "target": "ITEMS", "values": ["a", "b"]}
# status: changed
ITEMS = [
    "a",
    "b",
]
# output
ITEMS = []
