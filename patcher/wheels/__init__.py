"""The wheels room: pip's bytes of a release, fetched at most once, never used unchecked.

`vpatch diff`, `capture`, `backport`, `apply --adopt`, `wheel` and `matrix` compare a host's
files with the files pip installed from the release's wheel. Which module for which change:

    index       pip itself: list a package's releases, download one wheel (`python -m pip`,
                the user's pip configuration; vpatch never talks to an index)
    wheelhouse  wheels already on disk (--wheelhouse, $VPATCH_WHEELHOUSE, $VPATCH_MATRIX_WHEELS)
    wheel       one wheel file open, every member checked against its RECORD
    trust       owner/mode checks on the open descriptor, atomic writes, the cache roots
    store       the wheel store: wheelhouses, then the store, then pip; one `Store.for_run`
                per command run (no module state: two runs in one process share nothing)
    cache       the matrix's cache: a release's target files + RECORD, kept without the wheel,
                and the `Fetcher` that fills it from the store

Nothing here decides an outcome (that is `patcher.plan`) or prints (the commands do).
"""
