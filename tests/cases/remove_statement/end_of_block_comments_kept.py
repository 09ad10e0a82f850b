# spec: {"op": "remove_statement", "scope": "f", "match": "b()"}
# status: changed
def f():
    a()

    # section: cleanup
    # (kept: a blank line sets it apart)

    # attached to b, removed with it
    b()


def g():
    pass
# output
def f():
    a()

    # section: cleanup
    # (kept: a blank line sets it apart)


def g():
    pass
