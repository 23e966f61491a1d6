"""Sweeps: Hydra multirun of many cases with one MLflow parent run, per-case records, dry-run plans.

The sweep directory is the hand-off between the Hydra callback (sweep process) and the cases
(which a launcher may run in other processes or on other machines):

    <sweep dir>/popfair_sweep.json   parent run id, tracking URI, the overrides that vary
    <sweep dir>/cases/<job>.json     one record per case: status, error, run id, dry-run plan
"""
