# spec: {"op": "ensure_elements", "scope": "", "target": "LEVELS", "values": ["debug"]}
# status: changed
LEVELS = [
    "info",
    "warning"
]
# output
LEVELS = [
    "info",
    "warning",
    "debug"
]
