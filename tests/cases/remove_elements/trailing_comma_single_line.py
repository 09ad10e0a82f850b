# spec: {"op": "remove_elements", "scope": "", "target": "NAMES", "values": ["c"]}
# status: changed
NAMES = ["a", "b", "c",]
# output
NAMES = ["a", "b",]
