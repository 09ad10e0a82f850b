# spec: {"op": "ensure_elements", "scope": "Registry.setup", "containing": ["llama"], "values": ["qwen3"]}
# status: changed
class Registry:
    def setup(self):
        self.register(kind="eagle3", archs=["llama", "gpt_oss"])
        return self
# output
class Registry:
    def setup(self):
        self.register(kind="eagle3", archs=["llama", "gpt_oss", "qwen3"])
        return self
