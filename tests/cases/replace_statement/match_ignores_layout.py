# spec: {"op": "replace_statement", "scope": "build", "match": "result = compute(a, b,  flag=True)", "code": "result = compute(a, b, flag=False)"}
# status: changed
def build(a, b):
    result = compute(
        a,
        b,  # the second operand
        flag=True,
    )
    return result
# output
def build(a, b):
    result = compute(a, b, flag=False)
    return result
