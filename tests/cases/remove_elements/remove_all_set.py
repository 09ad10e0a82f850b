# spec: {"op": "remove_elements", "scope": "", "target": "PORTS", "values": [80, 443]}
# status: changed
PORTS = {80, 443}
# output
PORTS = set()
