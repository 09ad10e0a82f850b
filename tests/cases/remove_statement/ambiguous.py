# spec: {"op": "remove_statement", "scope": "Pool.resize", "match": "self.lock.acquire()"}
# status: ambiguous
class Pool:
    def resize(self, n):
        self.lock.acquire()
        for _ in range(n):
            self.lock.acquire()
