"""What a run table says: the readings every command that reads runs shares.

    intervals    every interval (`level` = the coverage): t, bootstrap percentile, Fieller, ...
    references   the best fixed arm, the best reachable reference, the share of its gap
    summary      `hb sim`'s and `hb grid run`'s summary table (final scores, t intervals)
    at_cost      each run read at a milestone of cost, by linear interpolation in cost

They read only the data contract (`hbsim.contract`) and `policies`. `ablations` imports them
(it may import anything); `hbsim` and `real_runs` do not.
"""
