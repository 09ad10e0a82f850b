# spec: {"op": "set_value", "scope": "", "target": "LIMITS", "key": "gpu", "value": 8}
# status: anchor_missing
LIMITS = dict(gpu=4)
