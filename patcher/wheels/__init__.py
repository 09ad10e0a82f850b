"""The wheels room: pip's bytes of a release, fetched at most once, never used unchecked.

`vpatch diff`, `capture`, `backport`, `apply --adopt`, `wheel` and `matrix` compare a host's
files with the files pip installed from the release's wheel. Which module for which change:

    pipfiles    pip's (and uv's) configuration read from their files and environment
    pipconf     what that configuration decides: indexes, find-links, TLS, proxy, timeout
    listing     PURE: project pages, the releases pip lists, the wheel pip picks
    indexclient vpatch's own index client: pages kept with their validators, whole wheels
    remote      the HTTP client and the ranged reads (only the members needed)
    index       pip itself, the fallback: `$VPATCH_PIP`, or a setting only pip honours
    wheelhouse  wheels already on disk (--wheelhouse, $VPATCH_WHEELHOUSE, $VPATCH_MATRIX_WHEELS)
    wheel       one wheel file open, every member checked against its RECORD
    trust       owner/mode checks on the open descriptor, atomic writes, the cache roots
    store       the wheel store: wheelhouses, the store, ranges, the index; one `Store.for_run`
                per command run (no module state: two runs in one process share nothing)
    cache       the matrix's cache: a release's target files + RECORD, kept without the wheel,
                and the `Fetcher` that fills it from the store

Nothing here decides an outcome (that is `patcher.plan`) or prints (the commands do).
"""
