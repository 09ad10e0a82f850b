# spec: {"op": "replace_statement", "scope": "", "match": "x = load()\ny = x + 1", "code": "x, y = load_pair()"}
# status: changed
import os

x = load()
y = x + 1
print(x, y)
# output
import os

x, y = load_pair()
print(x, y)
