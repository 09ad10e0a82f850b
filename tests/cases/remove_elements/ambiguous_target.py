# spec: {"op": "remove_elements", "scope": "Settings", "target": "flags", "values": ["-O2"]}
# status: ambiguous
import sys


class Settings:
    flags = ["-O2", "-g"]
    if sys.platform == "win32":
        flags = ["/O2"]
