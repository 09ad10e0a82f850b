# spec: {"op": "insert_statement", "scope": "serve", "match": "handle(req)", "code": "metrics.inc()"}
# status: changed
def serve(queue):
    while True:
        req = queue.get()
        with lock:
            handle(req)  # may raise
        log(req)
# output
def serve(queue):
    while True:
        req = queue.get()
        with lock:
            handle(req)  # may raise
            metrics.inc()
        log(req)
