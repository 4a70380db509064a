"""The data contract and its I/O: the only part of `hbsim` a report may import.

    names      every file, folder and column name (SPEC §7); re-exported here, so
               `from hbsim.contract import TRAIN_FILE` reads the names
    labels     run labels and part names: built and parsed (`name[k=v][part=P]`, `NAME@3x@lr0.5`)
    shapes     the shape of every record read back, and `read_record`, its one reader
    atomic     the one atomic write, file modes, temporaries, the written-files ledger
    folders    where a command may write: the output-folder checks before any work
    markers    the kind marker of every output folder: claim, complete, undo (`output_dir`)
    records    a run directory written and read; a grid's cells collected; tune.json
    tomlfile   the one reader of a TOML file a user hands hb
    lifeline   process handling: a helper ends with hb, Ctrl-C during start-up, stopping a
               pool, the start method, one liveness check, the fault hook
    threads    the one BLAS-thread pin

Only `names` is imported by this package's `__init__` (it is light); the others are
imported by their module names. Every module here imports only the standard library,
numpy/pandas/pyarrow, `policies.errors` / `policies.validate` and modules of this package.
"""
from hbsim.contract.names import *  # noqa: F401,F403  (the names ARE the package's top level)
