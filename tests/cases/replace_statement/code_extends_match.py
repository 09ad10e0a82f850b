# spec: {"op": "replace_statement", "scope": "", "match": "setup()", "code": "setup()\nsetup_plugins()"}
# status: changed
def main():
    pass


setup()
main()
# output
def main():
    pass


setup()
setup_plugins()
main()
