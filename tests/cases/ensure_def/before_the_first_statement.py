# spec: {"op": "ensure_def", "scope": "Model", "before": "forward", "code": "def aux_layers(self):\n    return (2, 4)\n"}
# status: changed
class Model:
    def forward(self, x):
        return x
# output
class Model:
    def aux_layers(self):
        return (2, 4)

    def forward(self, x):
        return x
