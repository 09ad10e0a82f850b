# spec: {"op": "ensure_import", "code": "import json"}
# status: changed
import os


def f():
    return 1


import late  # noqa: E402
# output
import os
import json


def f():
    return 1


import late  # noqa: E402
