# spec: {"op": "set_value", "scope": "helper", "target": "x", "value": 1}
# status: ambiguous
try:
    def helper():
        x = 0
except ImportError:
    def helper():
        x = 0
