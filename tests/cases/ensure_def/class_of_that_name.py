# spec: {"op": "ensure_def", "scope": "", "code": "def Config():\n    return 1\n"}
# status: anchor_missing
class Config:
    pass
