# spec: {"op": "replace_statement", "scope": "Runner.run", "match": "step()", "code": "for _ in range(2):\n  step()\n  log('step')"}
# status: changed
class Runner:
    def run(self, items):
        for item in items:
            try:
                step()
            except KeyError:
                continue
# output
class Runner:
    def run(self, items):
        for item in items:
            try:
                for _ in range(2):
                    step()
                    log('step')
            except KeyError:
                continue
