# spec: {"op": "ensure_elements", "scope": "Registry.load", "target": "names", "values": ["b", "c", "c", "a", "d"]}
# status: changed
class Registry:
    def load(self):
        names = ["a", "b"]
        return names
# output
class Registry:
    def load(self):
        names = ["a", "b", "c", "d"]
        return names
