# spec: {"op": "replace_statement", "scope": "Runner.run", "match": "step()", "code": "step(fast=True)"}
# status: ambiguous
class Runner:
    def run(self, fast):
        if fast:
            step()
        else:
            warm_up()
            step()
