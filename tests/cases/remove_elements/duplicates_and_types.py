# spec: {"op": "remove_elements", "scope": "", "target": "VALUES", "values": [1, "x"]}
# status: changed
VALUES = [1, 1.0, True, "1", 'x', 1, "y"]
# output
VALUES = [1.0, True, "1", "y"]
