# spec: {"op": "insert_statement", "scope": "Server.start", "match": "self.bind()", "code": "self.warm_up()"}
# status: unchanged
class Server:
    def start(self):
        self.bind()
        # inserted by a patch
        self.warm_up()
        self.listen()
