# spec: {"op": "insert_statement", "scope": "", "match": "import os", "code": "def home():\n    return os.environ['HOME']"}
# status: changed
import os
print(1)
# output
import os


def home():
    return os.environ['HOME']


print(1)
