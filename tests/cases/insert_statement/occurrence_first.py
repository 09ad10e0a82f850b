# spec: {"op": "insert_statement", "scope": "load", "match": "check(data)", "code": "log(data)", "position": "before", "occurrence": 1}
# status: changed
def load(paths):
    for path in paths:
        data = read(path)
        check(data)
    for extra in EXTRAS:
        data = read(extra)
        check(data)
    return data
# output
def load(paths):
    for path in paths:
        data = read(path)
        log(data)
        check(data)
    for extra in EXTRAS:
        data = read(extra)
        check(data)
    return data
