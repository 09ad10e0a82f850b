# spec: {"op": "remove_elements", "scope": "", "target": "SEEN", "values": ["a"]}
# status: unchanged
SEEN = set()
