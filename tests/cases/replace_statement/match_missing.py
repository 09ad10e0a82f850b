# spec: {"op": "replace_statement", "scope": "Runner.run", "match": "step(1)", "code": "step(2)"}
# status: anchor_missing
class Runner:
    def run(self):
        step()
