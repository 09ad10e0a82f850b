# spec: {"op": "insert_statement", "scope": "", "match": "register()", "code": "audit()"}
# status: ambiguous
import sys

if sys.platform == "linux":
    register()
else:
    register()
