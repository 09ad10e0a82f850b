# spec: {"op": "set_value", "scope": "Loader.__init__", "target": "self.aliases", "key": "kimi_k2", "value": "deepseek_v3"}
# status: changed
class Loader:
    def __init__(self):
        self.aliases = {'llama3': 'llama', 'qwen2': 'qwen'}
# output
class Loader:
    def __init__(self):
        self.aliases = {'llama3': 'llama', 'qwen2': 'qwen', 'kimi_k2': 'deepseek_v3'}
