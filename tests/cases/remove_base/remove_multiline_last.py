# spec: {"op": "remove_base", "scope": "Outer.Inner", "value": "SupportsEagle3"}
# status: changed
class Outer:
    class Inner(
        nn.Module,
        SupportsPP,
        SupportsEagle3,
    ):
        pass
# output
class Outer:
    class Inner(
        nn.Module,
        SupportsPP,
    ):
        pass
