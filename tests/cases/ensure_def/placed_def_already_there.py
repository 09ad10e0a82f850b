# spec: {"op": "ensure_def", "scope": "Model", "before": "forward", "code": "def aux_layers(self):\n    return (2, 4)\n"}
# status: unchanged
class Model:
    def forward(self, x):
        return x

    def aux_layers(self):
        return (2, 4)
