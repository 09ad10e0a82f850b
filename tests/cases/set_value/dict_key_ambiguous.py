# spec: {"op": "set_value", "scope": "", "target": "LIMITS", "key": "gpu", "value": 8}
# status: ambiguous
LIMITS = {"gpu": 1, "cpu": 2, "gpu": 4}
