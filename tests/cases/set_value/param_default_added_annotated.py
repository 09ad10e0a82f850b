# spec: {"op": "set_value", "scope": "LLMEngine.step", "param": "retries", "expr": "None"}
# status: changed
class LLMEngine:
    def step(self, batch, *, retries: int | None, verbose=False):
        return batch
# output
class LLMEngine:
    def step(self, batch, *, retries: int | None = None, verbose=False):
        return batch
