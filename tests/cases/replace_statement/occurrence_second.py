# spec: {"op": "replace_statement", "scope": "load", "match": "check(data)", "code": "check(data, strict=False)", "occurrence": 2}
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
        check(data, strict=False)
    return data
