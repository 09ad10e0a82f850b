# spec: {"op": "insert_statement", "scope": "Server.start", "match": "self.bind()", "code": "self.warm_up()"}
# status: changed
class Server:
    def start(self):
        self.warm_up()
        self.bind()
        self.listen()
# output
class Server:
    def start(self):
        self.warm_up()
        self.bind()
        self.warm_up()
        self.listen()
