# spec: {"op": "set_value", "scope": "LLMEngine.step", "param": "timeout", "value": 2.5}
# status: changed
class LLMEngine:
    def step(self, batch, timeout: float = 1.0, *, retries=3):
        return batch
# output
class LLMEngine:
    def step(self, batch, timeout: float = 2.5, *, retries=3):
        return batch
