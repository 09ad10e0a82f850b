# spec: {"op": "set_value", "scope": "", "target": "TIMEOUT", "expr": "60 * 5"}
# status: unchanged
TIMEOUT = 60*5  # seconds
