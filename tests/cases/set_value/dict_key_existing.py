# spec: {"op": "set_value", "scope": "", "target": "LIMITS", "key": "gpu", "value": 8}
# status: changed
LIMITS = {
    "cpu": 64,  # cores
    "gpu": 4,  # devices
}
# output
LIMITS = {
    "cpu": 64,  # cores
    "gpu": 8,  # devices
}
