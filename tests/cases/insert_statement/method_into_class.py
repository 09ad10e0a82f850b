# spec: {"op": "insert_statement", "scope": "Server", "match": "def start(self):\n    self.bind()", "code": "def stop(self):\n    self.close()"}
# status: changed
class Server:
    """A toy server."""

    def start(self):
        self.bind()

    def close(self):
        pass
# output
class Server:
    """A toy server."""

    def start(self):
        self.bind()

    def stop(self):
        self.close()

    def close(self):
        pass
