# spec: {"op": "insert_statement", "scope": "Server.stop", "match": "self.bind()", "code": "pass"}
# status: anchor_missing
class Server:
    def start(self):
        self.bind()
