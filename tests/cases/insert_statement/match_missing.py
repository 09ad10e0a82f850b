# spec: {"op": "insert_statement", "scope": "Server.start", "match": "self.bind(port)", "code": "pass"}
# status: anchor_missing
class Server:
    def start(self):
        self.bind()
