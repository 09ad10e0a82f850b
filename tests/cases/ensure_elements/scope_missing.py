# spec: {"op": "ensure_elements", "scope": "Registry.reload", "target": "names", "values": ["x"]}
# status: anchor_missing
class Registry:
    def load(self):
        names = ["a", "b"]
        return names
