# spec: {"op": "add_file", "file": "servekit/aux.py", "text": "def collect(states, layers):\n    return tuple(states[i] for i in layers)\n"}
# status: unchanged
def collect(states, layers):
    return tuple(states[i] for i in layers)
