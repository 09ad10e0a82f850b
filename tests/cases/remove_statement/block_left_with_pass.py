# spec: {"op": "remove_statement", "scope": "Pool.resize", "match": "self.grow(n)"}
# status: changed
class Pool:
    def resize(self, n):
        if n > 0:
            # grow eagerly
            self.grow(n)
        return n
# output
class Pool:
    def resize(self, n):
        if n > 0:
            pass
        return n
