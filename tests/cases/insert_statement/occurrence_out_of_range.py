# spec: {"op": "insert_statement", "scope": "load", "match": "check(data)", "code": "seen.add(data)", "occurrence": 5}
# status: anchor_missing
def load(paths):
    for path in paths:
        data = read(path)
        check(data)
    for extra in EXTRAS:
        data = read(extra)
        check(data)
    return data
