# spec: {"op": "ensure_elements", "scope": "Registry.load", "target": "labels", "values": ["x"]}
# status: anchor_missing
class Registry:
    def load(self):
        names = ["a", "b"]
        labels += ["c"]
        return names
