# spec: {"op": "remove_elements", "scope": "supported", "containing": ["a"], "values": ["c"]}
# status: changed
def supported():
    return ("a", "b", "c")
# output
def supported():
    return ("a", "b")
