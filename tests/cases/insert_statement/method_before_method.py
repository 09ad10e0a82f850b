# spec: {"op": "insert_statement", "scope": "Server", "match": "def close(self):\n    pass", "code": "@property\ndef closed(self) -> bool:\n    return self._closed", "position": "before"}
# status: changed
class Server:
    def start(self):
        self.bind()
    def close(self):
        pass
# output
class Server:
    def start(self):
        self.bind()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self):
        pass
