# spec: {"op": "replace_statement", "scope": "Worker.start", "match": "self.port = 8000", "code": "self.port = int(os.environ.get('PORT', 8000))"}
# status: changed
class Worker:
    def start(self):
        self.host = "0.0.0.0"

        # The port must not clash with the metrics server.
        self.port = 8000  # default
        self.serve()
# output
class Worker:
    def start(self):
        self.host = "0.0.0.0"

        # The port must not clash with the metrics server.
        self.port = int(os.environ.get('PORT', 8000))
        self.serve()
