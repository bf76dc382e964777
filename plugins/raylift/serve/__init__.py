"""Ray Serve knowledge, with no Airflow and no cluster I/O: what a Serve config is and whether it fits.

- :mod:`~raylift.serve.config` — build and merge the Serve config a user could ``serve deploy`` by hand;
- :mod:`~raylift.serve.validation` — the fit check (replicas x resources against the cluster's declared nodes),
  on the plain config dicts: no Ray on the Airflow side;
- ``ray_schema_check.py`` — Ray's own schema rules, a stand-alone script run by the Ray that will run the config
  (never imported here);
- :mod:`~raylift.serve.placement` — where Ray placed each arm's replicas, and which arm that favours;
- :mod:`~raylift.serve.hardware` — the hardware profiles (GPU, Neuron, Graviton instance shapes);
- :mod:`~raylift.serve.status` — reading Serve's own application status;
- :mod:`~raylift.serve.smoke` and :mod:`~raylift.serve.cold_start` — the first requests and the time to serve.
"""
