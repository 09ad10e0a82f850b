# spec: {"op": "ensure_def", "before": "helper", "code": "def aux_layers(n):\n    return (2, n // 2, n - 3)\n"}
# status: changed
LAYERS = 4
def helper():
    return 1
# output
LAYERS = 4


def aux_layers(n):
    return (2, n // 2, n - 3)


def helper():
    return 1
