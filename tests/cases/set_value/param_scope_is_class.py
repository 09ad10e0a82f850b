# spec: {"op": "set_value", "scope": "Maker", "param": "label", "value": "x"}
# status: anchor_missing
class Maker:
    label = "x"
