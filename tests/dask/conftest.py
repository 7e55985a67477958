"""A real two-process dask.distributed cluster for the dask adapter's tests (loopback only).

Tests that use it are skipped with the reason when dask or distributed is not installed
(``pip install nbxla[dask]``); each test module also skips itself without dask.
"""

import logging

import pytest


@pytest.fixture(scope="session")
def client():
    """2 worker processes, one thread each, on 127.0.0.1; closed after the session."""
    pytest.importorskip("dask.array", reason="dask[array] is not installed (pip install nbxla[dask])")
    distributed = pytest.importorskip("distributed",
                                      reason="distributed is not installed (pip install nbxla[dask])")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                       worker_dashboard_address=None, silence_logs=logging.ERROR)
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()
