# spec: {"op": "replace_statement", "scope": "load", "match": "check(data)", "code": "check(data, strict=False)", "occurrence": 3}
# status: anchor_missing
def load(paths):
    for path in paths:
        data = read(path)
        check(data)
    for extra in EXTRAS:
        data = read(extra)
        check(data)
    return data
