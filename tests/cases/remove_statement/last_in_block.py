# spec: {"op": "remove_statement", "scope": "main", "match": "cleanup()"}
# status: changed
def main():
    work()

    cleanup()


main()
# output
def main():
    work()


main()
