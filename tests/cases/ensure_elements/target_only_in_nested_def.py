# spec: {"op": "ensure_elements", "scope": "build", "target": "kinds", "values": ["x"]}
# status: anchor_missing
def build():
    def helper():
        kinds = ["a"]
        return kinds

    return helper()
