# spec: {"op": "set_value", "scope": "configure", "target": "self.mode", "value": "fast"}
# status: ambiguous
def configure(self, quick):
    if quick:
        self.mode = "quick"
    self.mode = "slow"
