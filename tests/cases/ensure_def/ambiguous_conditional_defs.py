# spec: {"op": "ensure_def", "scope": "", "code": "def fast_path(x):\n    return x\n"}
# status: ambiguous
if HAS_CUDA:
    def fast_path(x):
        return cuda(x)
else:
    def fast_path(x):
        return cpu(x)
