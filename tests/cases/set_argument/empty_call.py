# spec: {"op": "set_argument", "scope": "", "call": "make", "arg": "size", "value": "large"}
# status: changed
obj = make()
# output
obj = make(size="large")
