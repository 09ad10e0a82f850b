# spec: {"op": "ensure_elements", "scope": "Engine.__init__", "target": "self.hooks", "values": ["flush"]}
# status: changed
class Engine:
    def __init__(self, debug: bool) -> None:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            pass
        if debug:
            self.hooks: list[str] = [
                "trace",
            ]
# output
class Engine:
    def __init__(self, debug: bool) -> None:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            pass
        if debug:
            self.hooks: list[str] = [
                "trace",
                "flush",
            ]
