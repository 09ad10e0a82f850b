# spec: {"op": "remove_statement", "scope": "main", "match": "a = 1\nb = 2"}
# status: changed
def main():
    a = 1
    # between
    b = 2
    return 3
# output
def main():
    return 3
