"""Real stacks the benchmarks and the tests both drive: a local raylift stack (Airflow + Ray + vLLM on 127.0.0.1),
a bounded background client, a moto server. They live here because bench/ never imports tests/ (tests may import
bench/, as they import the stub server)."""
