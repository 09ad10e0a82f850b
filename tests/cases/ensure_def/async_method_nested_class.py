# spec: {"op": "ensure_def", "scope": "Outer.Inner", "code": "async def close(self) -> None:\n    await self.conn.close()\n"}
# status: changed
class Outer:
    class Inner:
        def open(self):
            return 1

    value = 2
# output
class Outer:
    class Inner:
        def open(self):
            return 1

        async def close(self) -> None:
            await self.conn.close()

    value = 2
