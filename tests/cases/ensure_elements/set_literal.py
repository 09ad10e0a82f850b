# spec: {"op": "ensure_elements", "scope": "", "target": "PORTS", "values": [8080, 443, 9000]}
# status: changed
PORTS = {80, 443}
# output
PORTS = {80, 443, 8080, 9000}
