# spec: {"op": "insert_statement", "scope": "Server.start", "match": "self.listen()", "code": "self.check()\nself.warm_up()", "position": "before"}
# status: unchanged
class Server:
    def start(self):
        self.bind()
        self.check(); self.warm_up()
        self.listen()
