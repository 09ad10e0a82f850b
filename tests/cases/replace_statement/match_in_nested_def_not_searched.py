# spec: {"op": "replace_statement", "scope": "Runner", "match": "step()", "code": "pass"}
# status: anchor_missing
class Runner:
    def run(self):
        step()
