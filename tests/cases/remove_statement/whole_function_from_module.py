# spec: {"op": "remove_statement", "scope": "", "match": "def legacy():\n    return 1"}
# status: changed
import os


def legacy():
    return 1


def current():
    return 2
# output
import os


def current():
    return 2
