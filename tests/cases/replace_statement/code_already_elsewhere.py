# spec: {"op": "replace_statement", "scope": "finish", "match": "legacy_log('done')", "code": "log('done')"}
# status: changed
def finish(fast):
    if fast:
        log("done")
        return 1
    legacy_log("done")
    return 0
# output
def finish(fast):
    if fast:
        log("done")
        return 1
    log('done')
    return 0
