# spec: {"op": "ensure_def", "scope": "Model", "code": "# EAGLE-3 reads these layers.\n@property\ndef aux_layers(self):\n    return (2, 4)\n"}
# status: changed
class Model:
    def forward(self, x):
        return x
# output
class Model:
    def forward(self, x):
        return x

    # EAGLE-3 reads these layers.
    @property
    def aux_layers(self):
        return (2, 4)
