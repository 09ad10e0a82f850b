# spec: {"op": "set_value", "scope": "", "target": "LIMITS", "key": "tpu", "value": 2}
# status: changed
LIMITS = {
    "cpu": 64,  # cores
    "gpu": 4,  # devices
}
# output
LIMITS = {
    "cpu": 64,  # cores
    "gpu": 4,  # devices
    "tpu": 2,
}
