# spec: {"op": "insert_statement", "scope": "load", "match": "check(data)", "code": "seen.add(data)", "occurrence": 2}
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
        check(data)
    for extra in EXTRAS:
        data = read(extra)
        check(data)
        seen.add(data)
    return data
