# spec: {"op": "replace_statement", "scope": "load", "match": "check(data)", "code": "check(data, strict=False)", "occurrence": 1}
# status: unchanged
def load(paths):
    for path in paths:
        data = read(path)
        check(data, strict=False)
    for extra in EXTRAS:
        data = read(extra)
        check(data)
    return data
