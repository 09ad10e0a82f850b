# spec: {"op": "ensure_import", "code": "import os, sys"}
# status: changed
import os

x = 1
# output
import os
import sys

x = 1
